"""The analytic cost the model tuner ranks by: one entry point for every target.

It reads only the IR (what each DMA and primitive call moves or computes, times the trip counts of
the loops around it), never a simulation or a measurement. On the SW26010 it is the thesis' model
(`swauto.tuner.sw26010_model`: per-transfer latency and transaction waste, fitted primitive time);
on the host, the host model (`swauto.tuner.host_model`, with this machine's measured constants). Each
target's `estimate` (backends/<target>/target.py) applies its model; this module dispatches by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from swauto import targets
from swauto.ir.analysis import traffic

if TYPE_CHECKING:
    from swauto.pipeline import Stages

__all__ = ["Estimate", "estimate", "peak_flops", "traffic"]  # traffic: for callers that read both


@dataclass(frozen=True)
class Estimate:
    dma_bytes: int
    flops: int
    memory_seconds: float
    compute_seconds: float
    overlapped: bool = True  # double buffered: transfers hide behind compute
    transfers: int = 0  # transfers one run issues (the SW26010's DMAs, the host's copies)

    @property
    def seconds(self) -> float:
        if self.overlapped:
            return max(self.memory_seconds, self.compute_seconds)
        return self.memory_seconds + self.compute_seconds


def estimate(stages: Stages, target: str, threads: int = 1) -> Estimate:
    """Predicted run time of a candidate (its IR `stages`) on `target` ('sw26010': one core group;
    'host': `threads` cores): the target's own model (`swauto.targets`)."""
    return targets.get(target).estimate(stages, threads)


def peak_flops(target: str, threads: int = 1) -> float:
    """The peak flops per second a percent of peak is measured against on `target` (with `threads` cores
    where it runs on threads)."""
    return targets.get(target).peak_flops(threads)
