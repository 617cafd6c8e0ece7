"""The compiler pipeline from a candidate to the IR the backends take, one named stage per pass."""

from __future__ import annotations

from swauto.frontend.check import BoundOperator
from swauto.ir.nodes import Module
from swauto.machine import SW26010
from swauto.passes.infer_dma import infer_dma
from swauto.passes.plan_local_memory import plan_local_memory
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import apply

Stages = list[tuple[str, Module]]


def lower(op: BoundOperator, candidate: Candidate, machine: SW26010) -> Stages:
    """IR after each stage: `schedule` (the transformed loop nest), then each pass. The last stage is
    the final IR. Raises `Rejected` when the candidate is illegal."""
    stages: Stages = [("seed", op.seed)]
    module = apply(op, candidate, machine)
    stages.append(("schedule", module))
    module = infer_dma(module)
    stages.append(("infer_dma", module))
    module = plan_local_memory(module, machine)
    stages.append(("plan_local_memory", module))
    return stages
