"""The `model` tuner: rank every legal candidate by the analytic cost, without running any."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile

from swauto.ir.nodes import Module
from swauto.schedule.candidate import Candidate
from swauto.tuner.cost_model import Estimate, estimate
from swauto.tuner.space import Space

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
    for stages, candidates in space.lowerings():  # the model reads the IR: one estimate per lowering
        predicted = estimate(stages, target, threads)
        ranked.extend(Ranked(c, stages, predicted) for c in candidates)
    # Among equally fast candidates prefer the one that moves less data, then the one that computes
    # less: it leaves more headroom (where the transfers bound both, the faster compute still shortens
    # the pipeline's fill and drain, which the model does not time).
    ranked.sort(key=lambda r: (r.estimate.seconds, r.estimate.dma_bytes, r.estimate.compute_seconds))
    # Closer than the model's resolution, the one that issues the fewest transfers comes first: each
    # transfer's costs the model does not time (how it queues behind the others in the one memory
    # controller) add up. (VGG16 conv1_2 and ResNet-50 res2_3x3 at B = 128 on the SW26010: two loop
    # orders the model rates 0.005% and 0.08% apart, of which the one issuing 40% fewer runs 4.0% and
    # 3.5% faster.)
    if ranked:
        limit = ranked[0].estimate.seconds * (1 + RESOLUTION)
        near = list(takewhile(lambda r: r.estimate.seconds <= limit, ranked))  # a prefix: sorted by seconds
        ranked[:len(near)] = sorted(near, key=lambda r: r.estimate.transfers)
    return ranked
