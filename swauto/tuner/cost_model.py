"""The analytic cost the model tuner ranks by: one entry point for every target.

It reads only the IR (what each DMA and primitive call moves or computes, times the trip counts of
the loops around it), never a simulation or a measurement. On the SW26010 it is the thesis' model
(`swauto.tuner.sw26010_model`: per-transfer latency and transaction waste, fitted primitive time);
on the host, the host model (`swauto.tuner.host_model`, with this machine's measured constants). Each
target's `estimate` (backends/<target>/target.py) applies its model; this module dispatches by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from swauto import targets
from swauto.ir.analysis import traffic

if TYPE_CHECKING:
    from swauto.pipeline import Stages
    from swauto.schedule.candidate import Candidate

# traffic: for callers that read both
__all__ = ["Estimate", "estimate", "peak_flops", "per_micro_kernel", "tied_micro_kernels", "traffic"]


class _Priced(Protocol):
    @property
    def seconds(self) -> float: ...


M = TypeVar("M")
T = TypeVar("T", bound=_Priced)


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


def estimate(stages: Stages, target: str, threads: int = 1, micro_kernel: tuple[int, int] | None = None) -> Estimate:
    """Predicted run time of a candidate (its IR `stages`, its `micro_kernel`) on `target` ('sw26010': one
    core group; 'host': `threads` cores): the target's own model (`swauto.targets`)."""
    return targets.get(target).estimate(stages, threads, micro_kernel)


def tied_micro_kernels(predicted: Mapping[M, T], tolerance: float) -> dict[M, T]:
    """One lowering's estimates per micro-kernel (`predicted`, in the machine's order of preference):
    a micro-kernel not cheaper than the first by more than `tolerance` (the target's `micro_kernel_tolerance`:
    on the host, register tiles whose timings calibration counts as tied) takes the first's estimate, so the
    ranking keeps the first there. On the host, without this rule, of the B = 1 convolutions' picks that
    changed when each candidate was priced in its own tile, deep 3 x 3 layers whose 4 x 3 price was 1 - 3%
    below their 6 x 2 one ran up to 1.4x slower in it on two threads; with it, fewer change, and those ran
    1.10x as fast in geometric mean on one thread, 1.04x on two (MobileNetV2's projections to 24 channels,
    three vectors the 4 x 3 tile covers at once: 1.3 - 1.6x)."""
    first = next(iter(predicted.values()))
    return {kernel: estimate if estimate.seconds < first.seconds * (1 - tolerance) else first
            for kernel, estimate in predicted.items()}


def per_micro_kernel(candidates: Iterable[Candidate], price: Callable[[tuple[int, int] | None], T],
                     tolerance: float) -> dict[tuple[int, int] | None, T]:
    """`price` of one lowering in each micro-kernel its `candidates` name (the model reads the IR: one
    estimate per lowering and tile), tied within `tolerance` as `tied_micro_kernels` ties them."""
    kernels = dict.fromkeys(c.micro_kernel for c in candidates)
    return tied_micro_kernels({kernel: price(kernel) for kernel in kernels}, tolerance)


def peak_flops(target: str, threads: int = 1) -> float:
    """The peak flops per second a percent of peak is measured against on `target` (with `threads` cores
    where it runs on threads)."""
    return targets.get(target).peak_flops(threads)
