"""The analytic cost the model tuner ranks by: one entry point for both targets.

It reads only the IR (what each DMA and primitive call moves or computes, times the trip counts of
the loops around it), never a simulation or a measurement. On the SW26010 it is the thesis' model
(`swauto.tuner.sw26010_model`: per-transfer latency and transaction waste, fitted primitive time);
on the host, the host model (`swauto.tuner.host_model`, with this machine's measured constants).
"""

from __future__ import annotations

from dataclasses import dataclass

from swauto.ir.analysis import traffic
from swauto.machine import SUNWAY
from swauto.pipeline import Stages, before_double_buffering


@dataclass(frozen=True)
class Estimate:
    dma_bytes: int
    flops: int
    memory_seconds: float
    compute_seconds: float
    overlapped: bool = True  # double buffered: transfers hide behind compute

    @property
    def seconds(self) -> float:
        if self.overlapped:
            return max(self.memory_seconds, self.compute_seconds)
        return self.memory_seconds + self.compute_seconds


def estimate(stages: Stages, target: str, threads: int = 1) -> Estimate:
    """Predicted run time of a candidate (its IR `stages`) on `target` ('sw26010': one core group;
    'host': `threads` cores). On the SW26010 the mesh GEMM synchronises its CPEs, so a transfer only
    overlaps compute when it is double buffered (thesis 3.2.1): the times add up otherwise."""
    if target == "host":
        # --- host: the host model (swauto.tuner.host_model), with this machine's measured constants ---
        from swauto.tuner.host_model import estimate as host_estimate
        from swauto.tuner.host_model import machine

        module = before_double_buffering(stages)
        dma_bytes, flops = traffic(module)
        host = host_estimate(module, threads, machine())
        return Estimate(dma_bytes, flops, min(host.traffic, host.seconds), host.seconds)
    module = before_double_buffering(stages)
    overlapped = any(name == "double_buffer" for name, _ in stages)
    if target == "sw26010":
        # --- sw26010: the thesis' analytic model (swauto.tuner.sw26010_model; issue 4) ---
        # Single buffered, the terms are T_DMA and T_compute (they add up). Double buffered, the
        # memory term is the model's total (the time until the last transfer completes, stalls and
        # prologue included), which is never below T_compute: `seconds` is the model's figure.
        from swauto.tuner.sw26010_model import estimate as sw26010_estimate

        model = sw26010_estimate(module, stages[-1][1], overlapped, SUNWAY)
        memory = model.seconds if overlapped else model.dma_seconds
        return Estimate(model.dma_bytes, model.flops, memory, model.compute_seconds, overlapped)
    raise ValueError(f"unknown target {target!r}")


def peak_flops(target: str, threads: int = 1) -> float:
    """The peak flops per second a percent of peak is measured against: one core group of the SW26010, or
    `threads` cores of this host, each at the in-register FMA peak its calibration measured (per core times
    threads: cores share nothing an in-register loop uses, so it is the bound; when all cores are busy their
    clock may drop a few percent, which makes a report's percent a little low, never above 100)."""
    if target == "sw26010":
        return SUNWAY.peak_flops
    if target == "host":
        from swauto.tuner.host_model import machine

        return machine().peak_flops * threads
    raise ValueError(f"unknown target {target!r}")
