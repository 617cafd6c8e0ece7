"""Measured tuning on the host: run candidates and keep the fastest.

`measure` times every legal candidate; `hybrid` only the host model's `top` best. Each candidate is
compiled (through the JIT's disk cache), run to warm up, then timed `runs` times, or as many more as
take `LEAST_SECONDS`, on random inputs; its score is the median. The few fastest are then timed again
in turns (`IN_TURNS`), which rank them: on a machine shared with others, the speed of the whole
machine drifts while candidates are timed one after another (here the same program ran 10 - 15%
apart a few seconds later), so a candidate's time alone says as much about when it ran as about the
candidate.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from swauto.ir.nodes import Module
from swauto.schedule.candidate import Candidate
from swauto.tuner.cost_model import per_micro_kernel
from swauto.tuner.host_model import TILE_TOLERANCE, HostEstimate, Machine, estimate
from swauto.tuner.model_tuner import by_model
from swauto.tuner.space import Space

if TYPE_CHECKING:
    from swauto.backends.host.knobs import Knobs

HYBRID_TOP = 8
IN_TURNS = 8  # the fastest candidates timed again in turns, which rank them
ROUNDS = 3  # the turns each of them takes (each a warm-up call and `runs` timed)
LEAST_SECONDS = 0.03  # what the calls of a candidate timed alone take at least (`median_seconds`)
MOST_RUNS = 50


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
    for stages, candidates in space.lowerings():
        predicted = per_micro_kernel(candidates, lambda tile, m=stages[-1][1]: estimate(m, threads, machine, tile=tile),
                                     TILE_TOLERANCE)
        ranked.extend(Measured(c, stages, predicted[c.micro_kernel], float("inf")) for c in candidates)
    return by_model(ranked, lambda r: r.predicted.seconds, lambda r: r.predicted.copies)


def tune(space: Space, threads: int, machine: Machine, top: int | None = None, runs: int = 3) -> list[Measured]:
    """The `top` best candidates by the model (all with None), measured, fastest measured first: the
    `IN_TURNS` fastest of a first pass (each timed alone; none where there are no more of them) timed
    again in turns, `ROUNDS` x `runs` calls each, first, by those times; the others after them."""
    ranked = rank_by_model(space, threads, machine)
    chosen = ranked if top is None else ranked[:top]

    def call(r: Measured) -> Callable[[], object]:
        return kernel_call(r.stages[-1][1], threads, machine.knobs(r.candidate.micro_kernel))

    alone = [median_seconds(call(r), runs) for r in chosen] if len(chosen) > IN_TURNS else [0.0] * len(chosen)
    order = sorted(range(len(chosen)), key=alone.__getitem__)
    finalists, rest = order[:IN_TURNS], order[IN_TURNS:]
    in_turns = median_seconds_in_turns([call(chosen[i]) for i in finalists], runs, ROUNDS)
    measured = [replace(chosen[i], seconds=seconds) for i, seconds in zip(finalists, in_turns, strict=True)]
    return sorted(measured, key=lambda r: r.seconds) + [replace(chosen[i], seconds=alone[i]) for i in rest]


def median_seconds(call: Callable[[], object], runs: int, least_seconds: float = LEAST_SECONDS) -> float:
    """The median wall time of `runs` calls of `call`, or of as many more as take `least_seconds` (at
    most `MOST_RUNS`), after one that warms caches up and tells how long a call takes. A short kernel's
    few calls say little on a shared machine: MobileNetV2 block2.1.depthwise at B = 8 (about 1.4 ms a
    call), timed 12 times in a row, read 1.27 - 2.01 ms in medians of 3 calls and 1.29 - 1.61 in
    medians of 30."""
    warm = _timed(call, 1)[0]
    runs = max(runs, min(MOST_RUNS, math.ceil(least_seconds / warm) if warm > 0 else runs))
    return statistics.median(_timed(call, runs))


def median_seconds_in_turns(calls: Sequence[Callable[[], object]], runs: int, rounds: int,
                            ready: Callable[[], object] = lambda: None) -> list[float]:
    """Per function of `calls`, the median wall time of its `rounds` x `runs` calls: in each round each
    function in turn is called once to warm the caches up (the others' data took them), then timed `runs`
    times; every other round in the reverse order. A drift of the machine's speed meanwhile (other
    tenants' load) then hits them alike. `ready` is called before each turn (calibration waits there for
    a quiet core: `tuner/quiet`)."""
    times: list[list[float]] = [[] for _ in calls]
    turns = list(zip(calls, times, strict=True))
    for round_ in range(rounds):
        for function, samples in turns if round_ % 2 == 0 else turns[::-1]:
            ready()
            function()
            samples += _timed(function, runs)
    return [statistics.median(samples) for samples in times]


def _timed(call: Callable[[], object], runs: int) -> list[float]:
    """The wall time of each of `runs` calls of `call`."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def kernel_call(module: Module, threads: int, knobs: Knobs | None = None) -> Callable[[], object]:
    """A call of `module`'s host kernel compiled with `knobs` (None: the backend's default) on random
    inputs, the same at every call, its constants' tiles arranged once before (as `Kernel.prepare` does)."""
    from swauto.backends.host import compile_module

    program = compile_module(module, knobs=knobs)
    rng = np.random.default_rng(0)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in module.tensors}
    arrays.update(program.prepack(arrays))
    return lambda: program.run(arrays, threads=threads)


def time_module(module: Module, threads: int, runs: int = 3, knobs: Knobs | None = None) -> float:
    """Median seconds of `runs` calls of `module`'s host kernel compiled with `knobs` (None: the
    backend's default) on random inputs (after a warm-up)."""
    return median_seconds(kernel_call(module, threads, knobs), runs)
