"""Measured tuning on the host: run candidates and keep the fastest.

`measure` times every legal candidate; `hybrid` only the host model's `top` best. Each candidate is
compiled (through the JIT's disk cache), run once to warm up, then timed `runs` times on random
inputs; its score is the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from swauto.ir.nodes import Module
from swauto.schedule.candidate import Candidate
from swauto.tuner.host_model import HostEstimate, Machine, estimate
from swauto.tuner.model_tuner import by_model
from swauto.tuner.space import Space

if TYPE_CHECKING:
    from swauto.backends.host.knobs import Knobs

HYBRID_TOP = 8


@dataclass(frozen=True)
class Measured:
    candidate: Candidate
    stages: list[tuple[str, Module]]
    predicted: HostEstimate
    seconds: float  # measured median; inf when not measured


def rank_by_model(space: Space, threads: int, machine: Machine) -> list[Measured]:
    """Legal candidates, fastest predicted first, as the model tuner orders them (`by_model`: near-ties
    by fewer copies; ties keep the space's order); none is run."""
    ranked = []
    for stages, candidates in space.lowerings():  # the model reads the IR: one estimate per lowering
        predicted = estimate(stages[-1][1], threads, machine)
        ranked.extend(Measured(c, stages, predicted, float("inf")) for c in candidates)
    return by_model(ranked, lambda r: r.predicted.seconds, lambda r: r.predicted.copies)


def tune(space: Space, threads: int, machine: Machine, top: int | None = None, runs: int = 3) -> list[Measured]:
    """The `top` best candidates by the model (all with None), measured, fastest measured first."""
    ranked = rank_by_model(space, threads, machine)
    chosen = ranked if top is None else ranked[:top]
    measured = [Measured(r.candidate, r.stages, r.predicted,
                         time_module(r.stages[-1][1], threads, runs, machine.knobs(r.candidate.micro_kernel)))
                for r in chosen]
    return sorted(measured, key=lambda r: r.seconds)


def median_seconds(call: Callable[[], object], runs: int) -> float:
    """The median wall time of `runs` calls of `call`, after one call that warms caches up."""
    call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def time_module(module: Module, threads: int, runs: int = 3, knobs: Knobs | None = None) -> float:
    """Median seconds of `runs` calls of `module`'s host kernel compiled with `knobs` (None: the
    backend's default) on random inputs (after a warm-up)."""
    from swauto.backends.host import compile_module

    program = compile_module(module, knobs=knobs)
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in module.tensors}
    return median_seconds(lambda: program.run(arrays, threads=threads), runs)
