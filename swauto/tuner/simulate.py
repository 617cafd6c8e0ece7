"""The `simulate` and `hybrid` tuners for the SW26010: run candidates on the timed simulator.

`simulate` is the black box: it times every legal candidate (backends/sw26010/timing.py, no data
moved) and keeps the fastest. `hybrid` times only the analytic model's `top` best. Both also report
the model's prediction of every candidate they time, and the wall time each part took.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from swauto.backends.sw26010 import time_module
from swauto.backends.sw26010.target import NAME
from swauto.machine import SUNWAY
from swauto.tuner.model_tuner import Ranked, rank
from swauto.tuner.space import Space

HYBRID_TOP = 8


@dataclass(frozen=True)
class Simulated:
    """A candidate with the model's figure and the timed simulator's (`simulated_s`; inf if not run)."""

    ranked: Ranked
    simulated_s: float

    @property
    def predicted_s(self) -> float:
        return self.ranked.estimate.seconds


@dataclass(frozen=True)
class Tuning:
    """Candidates fastest first (simulated ones by simulated time, then the rest by the model) and
    the wall time spent ranking by the model and simulating."""

    results: list[Simulated]
    model_s: float
    simulate_s: float

    @property
    def best(self) -> Simulated:
        return self.results[0]


def simulate_all(ranked: Iterable[Ranked], progress: Callable | None = None) -> list[Simulated]:
    """Time each candidate on the timed simulator, in the given order."""
    items = list(ranked)
    return [Simulated(r, time_module(r.stages[-1][1], SUNWAY).seconds) for r in (progress or list)(items)]


def tune(space: Space, top: int | None = None, progress: Callable | None = None) -> Tuning:
    """Rank the space by the model, then simulate the `top` best (every candidate with None: the
    black box). The result lists the simulated candidates fastest first, then the others."""
    started = time.perf_counter()
    ranked = rank(space, NAME)
    model_s = time.perf_counter() - started
    chosen = ranked if top is None else ranked[:top]
    started = time.perf_counter()
    simulated = sorted(simulate_all(chosen, progress), key=lambda s: s.simulated_s)
    simulate_s = time.perf_counter() - started
    rest = [Simulated(r, float("inf")) for r in ranked[len(chosen):]]
    return Tuning(simulated + rest, model_s, simulate_s)
