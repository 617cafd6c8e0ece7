"""A first analytic cost: DMA bytes over memory bandwidth against flops over peak, the larger wins.

It reads only the final IR (what each DMA and primitive call moves or computes, times the trip
counts of the loops around it), never a simulation or a measurement. The thesis' detailed model
(per-transfer latency and transaction waste, fitted primitive time) replaces it in a later issue.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from swauto.ir.analysis import traffic, trip_count
from swauto.ir.nodes import Gemm, Module
from swauto.ir.visitor import walk
from swauto.machine import HOST, SUNWAY


@dataclass(frozen=True)
class Estimate:
    dma_bytes: int
    flops: int
    memory_seconds: float
    compute_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.memory_seconds, self.compute_seconds)


def _host_scalar_flops(module: Module) -> int:
    """Flops of primitive calls whose vectorized dimension is not the contiguous axis of C: the host
    cannot vectorize those loops (the SW26010 primitive can, with its own layout inside LDM)."""
    return sum(
        node.flops * prod(trip_count(loop) for loop in loops)
        for node, loops in walk(module.body)
        if isinstance(node, Gemm) and node.c.dims[-1] != node.vectorize
    )


def estimate(module: Module, target: str, threads: int = 1) -> Estimate:
    """Predicted run time of `module` on `target` ('sw26010': one core group; 'host': `threads` cores)."""
    dma_bytes, flops = traffic(module)
    if target == "sw26010":
        bandwidth, peak = SUNWAY.peak_bandwidth, SUNWAY.peak_flops
        compute = flops / peak
    else:
        bandwidth, peak = HOST.memory_bandwidth, HOST.peak_flops_per_core * threads
        scalar = _host_scalar_flops(module)
        compute = (flops - scalar) / peak + scalar * HOST.vector_lanes / peak
    return Estimate(dma_bytes, flops, dma_bytes / bandwidth, compute)


def peak_flops(target: str, threads: int = 1) -> float:
    return SUNWAY.peak_flops if target == "sw26010" else HOST.peak_flops_per_core * threads
