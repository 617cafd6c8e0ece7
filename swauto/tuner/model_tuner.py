"""The `model` tuner: rank every legal candidate by the analytic cost, without running any."""

from __future__ import annotations

from dataclasses import dataclass

from swauto.ir.nodes import Module
from swauto.schedule.candidate import Candidate
from swauto.tuner.cost_model import Estimate, estimate
from swauto.tuner.space import Space


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    stages: list[tuple[str, Module]]
    estimate: Estimate


def rank(space: Space, target: str, threads: int = 1) -> list[Ranked]:
    """Legal candidates, cheapest predicted first; ties keep the space's stable order."""
    ranked = []
    for stages, candidates in space.lowerings():  # the model reads the IR: one estimate per lowering
        predicted = estimate(stages, target, threads)
        ranked.extend(Ranked(c, stages, predicted) for c in candidates)
    # Among equally fast candidates prefer the one that moves less data, then the one that computes
    # less: it leaves more headroom (where the transfers bound both, the faster compute still shortens
    # the pipeline's fill and drain, which the model does not time).
    return sorted(ranked, key=lambda r: (r.estimate.seconds, r.estimate.dma_bytes, r.estimate.compute_seconds))
