"""Facts read off an IR without changing it: trip counts, bytes moved, flops."""

from __future__ import annotations

from math import prod

from swauto.ir import expr as ex
from swauto.ir.nodes import Call, Dma, For, Module
from swauto.ir.visitor import walk
from swauto.machine import DTYPE_BYTES


def trip_count(loop: For, env: dict[str, int] | None = None) -> int:
    """Iterations of `loop` (its bounds must be constant, or constant given `env`)."""
    start, stop = ex.evaluate(loop.start, env or {}), ex.evaluate(loop.stop, env or {})
    return max(0, (stop - start + loop.stride - 1) // loop.stride)


def traffic(module: Module) -> tuple[int, int]:
    """Bytes moved by DMA and flops computed by one run of `module` (loop bounds must be constant)."""
    dma_bytes = flops = 0
    for node, loops in walk(module.body):
        trips = prod(trip_count(loop) for loop in loops)
        if isinstance(node, Dma):
            size = DTYPE_BYTES[module.tensor(node.tensor.name).dtype] * prod(node.tensor.extents)
            dma_bytes += size * trips
        elif isinstance(node, Call):
            flops += node.flops * trips
    return dma_bytes, flops
