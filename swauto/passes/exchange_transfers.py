"""Exchanged transfers: a GEMM tile moved in long blocks, then spread over the mesh by register
communication (SW26010; thesis 3.1.4).

The GEMM's mesh layout splits each row of a transfer (a run along the box's last axis) over the 8
mesh columns. At batch 1 with the channels innermost, a row is one pixel's channels: 256 bytes for
64 of them, so 32-byte pieces, the blocks the DMA moves slowest (5 GB/s in the machine's measured
table, against 18 GB/s for 256-byte blocks). Such a transfer is better moved as a data-parallel
buffer's is, its longest contiguous runs cut so that the CPEs move about one block each. The CPEs
of each mesh row then pass the pieces to those the mesh layout gives them, over the row register
network: a get once it has arrived, a put before it leaves. A window (a first layer's input, its
kernel taps in K: rows of 3 channels, 12-byte mesh pieces, overlapping) moves as its bounding box,
fewer bytes in long runs, and the CPEs build the window while they exchange it (`Dma.moved_box`).

Guarantees: a transfer between a tensor and a mesh-spread buffer is marked `exchanged` exactly where,
at the machine's measured DMA table's bandwidths, its box in mesh pieces takes at least
`exchange_min_gain` times as long as the box the engine moves instead in data-parallel blocks (never
on a machine whose `exchange_min_gain` is 0: no mesh).
Nothing else changes: every buffer and tensor holds the same data after every statement (an
exchange changes which CPE moves a piece, not where it lands), so no dependence or local memory
changes either.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import prod

from swauto.ir.memory import block_bytes
from swauto.ir.nodes import Dma, Module, Stmt
from swauto.ir.visitor import Rewriter
from swauto.machine import DTYPE_BYTES, SW26010, LocalMemoryMachine

Box = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # extents, steps, walks


@lru_cache(maxsize=1 << 14)
def exchanges(shape: tuple[int, ...], window: Box, bounding: Box, element_bytes: int, machine: SW26010) -> bool:
    """Whether a transfer of this box of a tensor of `shape` into a mesh-spread buffer is exchanged: its
    `window` moved in mesh pieces takes at least `exchange_min_gain` times as long, at the measured
    table's bandwidths, as the box the DMA engine would move instead (`bounding`: the window's bounding
    box, or the window itself where its rows do not overlap) in data-parallel blocks."""
    seconds = []
    for (extents, steps, walks), flat in ((window, False), (bounding, True)):
        block = block_bytes(shape, extents, element_bytes, flat, machine.mesh_columns, machine.cpes, steps, walks)
        seconds.append(prod(extents) * element_bytes / machine.measured_bandwidth(block))
    mesh, flat = seconds
    return mesh >= machine.exchange_min_gain * flat


class _Exchange(Rewriter):
    def __init__(self, module: Module, machine: SW26010) -> None:
        self.machine = machine
        self.tensors = {t.name: t for t in module.tensors}
        self.mesh = {b.name for b in module.buffers if b.spread == "mesh"}
        self.changed = False

    def rewrite_Dma(self, dma: Dma) -> Stmt:
        extents = dma.tensor.extents
        if dma.buffer.name not in self.mesh or not all(isinstance(e, int) for e in extents):
            return dma
        tensor = self.tensors[dma.tensor.name]
        bounding = dma.tensor.bounding_box()  # what it moves once exchanged (`Dma.moved_box`)
        if not exchanges(tensor.shape, (extents, dma.tensor.steps, dma.tensor.walks),
                         (bounding.extents, bounding.steps, bounding.walks), DTYPE_BYTES[tensor.dtype], self.machine):
            return dma
        self.changed = True
        return replace(dma, exchanged=True)


def exchange_transfers(module: Module, machine: LocalMemoryMachine) -> Module:
    if not machine.exchange_min_gain:
        return module
    assert isinstance(machine, SW26010), "only the SW26010 has a mesh to exchange over"
    exchange = _Exchange(module, machine)
    body = exchange.rewrite(module.body)
    return replace(module, body=body) if exchange.changed else module
