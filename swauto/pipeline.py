"""The compiler pipeline from a candidate to the IR the backends take, one named stage per pass."""

from __future__ import annotations

from swauto.errors import Rejected
from swauto.frontend.check import BoundOperator
from swauto.ir import verify
from swauto.ir.nodes import Module
from swauto.machine import LocalMemoryMachine
from swauto.passes.double_buffer import double_buffer
from swauto.passes.hoist_dma import hoist_dma
from swauto.passes.infer_dma import infer_dma
from swauto.passes.pad_primitive import pad_primitive
from swauto.passes.peel_boundaries import peel_boundaries
from swauto.passes.plan_local_memory import plan_local_memory
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import apply

Stages = list[tuple[str, Module]]


def lower(op: BoundOperator, candidate: Candidate, machine: LocalMemoryMachine) -> Stages:
    """IR after each stage: `seed`, `schedule` (the transformed loop nest), then each pass. The last
    stage is the final IR. Raises `Rejected` when the candidate is illegal. With `SWAUTO_VERIFY=1`,
    every stage is verified (`swauto.ir.verify`)."""
    stages: Stages = [("seed", op.seed)]
    module = apply(op, candidate, machine)
    stages.append(("schedule", module))
    module = peel_boundaries(module)
    stages.append(("peel_boundaries", module))
    module = pad_primitive(module, machine)
    stages.append(("pad_primitive", module))
    placed = infer_dma(module)
    stages.append(("infer_dma", placed))
    module = hoist_dma(module, machine, candidate.double_buffer, placed)
    stages.append(("hoist_dma", module))
    if candidate.double_buffer:
        doubled = double_buffer(module)
        if doubled == module:
            raise Rejected("no transfer inside a loop to double buffer")
        module = doubled
        stages.append(("double_buffer", module))
    module = plan_local_memory(module, machine)
    stages.append(("plan_local_memory", module))
    if verify.enabled():
        for name, stage in stages:
            verify.verify(stage, name)
    return stages


def before_double_buffering(stages: Stages) -> Module:
    """The last stage before `double_buffer`: the same transfers, each written once, which is what
    static counts of bytes moved read (double buffering moves the same bytes)."""
    candidates = [module for name, module in stages if name not in ("double_buffer", "plan_local_memory")]
    return candidates[-1]
