"""The `model` tuner: rank every legal candidate by the analytic cost, without running any."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import takewhile
from typing import TypeVar

from swauto import targets
from swauto.ir.nodes import Module
from swauto.schedule.candidate import Candidate
from swauto.tuner.cost_model import Estimate, estimate, per_micro_kernel
from swauto.tuner.space import Space

T = TypeVar("T")

# Candidates the model rates closer than this (relative) are ordered by other figures (`rank`).
RESOLUTION = 0.002


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    stages: list[tuple[str, Module]]
    estimate: Estimate


def rank(space: Space, target: str, threads: int = 1) -> list[Ranked]:
    """Legal candidates, cheapest predicted first (among those within `RESOLUTION` of the cheapest, the
    fewest transfers first); ties keep the space's stable order."""
    ranked = []
    tolerance = targets.get(target).micro_kernel_tolerance
    for stages, candidates in space.lowerings():
        predicted = per_micro_kernel(candidates, partial(estimate, stages, target, threads), tolerance)
        ranked.extend(Ranked(c, stages, predicted[c.micro_kernel]) for c in candidates)
    # Among equally fast candidates prefer the one that moves less data, then the one that computes
    # less: it leaves more headroom (where the transfers bound both, the faster compute still shortens
    # the pipeline's fill and drain, which the model does not time).
    return by_model(ranked, lambda r: r.estimate.seconds, lambda r: r.estimate.transfers,
                    then=lambda r: (r.estimate.dma_bytes, r.estimate.compute_seconds))


def by_model(items: list[T], seconds: Callable[[T], float], transfers: Callable[[T], int],
             then: Callable[[T], tuple] = lambda _: ()) -> list[T]:
    """`items` cheapest first by `seconds`, then by `then`; closer than the model's resolution to the
    cheapest, the one that issues the fewest `transfers` comes first. Each transfer's costs the model
    does not time add up: on the SW26010 how it queues behind the others in the one memory controller
    (YOLOv2 conv3 at B = 1: two loop orders the model rates 0.004% apart, of which the one issuing a
    third fewer transfers runs 3% faster); on the host a copy's and the calls'
    own cost (GEMM 128 x 4096 x 512 on one thread: tiles of 32 x 32 priced as tiles of 128 x 1024,
    1153 copies against 13, 99.8 against 104.4 GFLOPS)."""
    ordered = sorted(items, key=lambda item: (seconds(item), *then(item)))
    if ordered:
        limit = seconds(ordered[0]) * (1 + RESOLUTION)
        near = list(takewhile(lambda item: seconds(item) <= limit, ordered))  # a prefix: sorted by seconds
        ordered[:len(near)] = sorted(near, key=transfers)
    return ordered
