"""The compiler pipeline from a candidate to the IR the backends take, one named stage per pass."""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from itertools import takewhile

from swauto.errors import Rejected
from swauto.frontend.check import BoundOperator
from swauto.ir import verify
from swauto.ir.nests import contexts, map_statements, statements
from swauto.ir.nodes import Alloc, Module, Seq, Stmt, seq
from swauto.ir.rename import prefix_buffers
from swauto.machine import LocalMemoryMachine
from swauto.passes.double_buffer import double_buffer
from swauto.passes.exchange_transfers import exchange_transfers
from swauto.passes.fold_zeros import fold_zeros
from swauto.passes.forward_transfers import forward_transfers
from swauto.passes.guard_padding import guard_padding
from swauto.passes.hoist_dma import hoist_dma
from swauto.passes.infer_dma import infer_dma
from swauto.passes.init_outputs import init_outputs
from swauto.passes.pad_primitive import pad_primitive
from swauto.passes.peel_boundaries import peel_boundaries
from swauto.passes.plan_local_memory import plan_local_memory
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import apply

Stages = list[tuple[str, Module]]
# The passes each statement goes through, in order (`double_buffer` only for double-buffered candidates,
# `guard_padding` only on a machine that `skips_zero_tiles`, `exchange_transfers` only where it exchanges,
# `fold_zeros` only where it folds, on a machine that `folds_zeros`).
NEST_PASSES = ("peel_boundaries", "pad_primitive", "guard_padding", "infer_dma", "hoist_dma", "exchange_transfers",
               "double_buffer", "fold_zeros", "plan_local_memory")
OPTIONAL_PASSES = ("guard_padding", "exchange_transfers", "double_buffer", "fold_zeros")


def lower(op: BoundOperator, candidate: Candidate, machine: LocalMemoryMachine) -> Stages:
    """IR after each stage: `seed`, `schedule` (the transformed loop nests), `init_outputs` (when a
    statement overwrites a combined output), then each pass. The last stage is the final IR. Raises
    `Rejected` when the candidate is illegal. With `SWAUTO_VERIFY=1`, every stage is verified
    (`swauto.ir.verify`).

    The statements of the compute block are lowered one by one (each nest has its own buffers, named
    `s<i>_...` when there are several, which may share local memory with other statements') and put
    back in order, inside their sequence loops (a statement inside one sees the loop's variable as a
    number: `Module.context`): a statement's transfers are all waited for before the next one starts."""
    stages: Stages = [("seed", op.seed)]
    module = apply(op, candidate, machine)
    stages.append(("schedule", module))
    initialised = init_outputs(module)
    if initialised is not module:
        stages.append(("init_outputs", initialised))
    nests = statements(initialised)
    if len(nests) == 1:
        stages += _lower_nest(initialised, candidate.double_buffer, machine)
    else:
        lowered = [_lower_statement(replace(initialised, body=nest, context=context), index,
                                    candidate.double_buffer, machine)
                   for index, (nest, context) in enumerate(zip(nests, contexts(initialised), strict=True))]
        if candidate.double_buffer and not any(name == "double_buffer" for per in lowered for name, _ in per):
            raise Rejected("no transfer inside a loop to double buffer")
        for name in NEST_PASSES[:-1]:
            # An optional stage only where a statement has it.
            if name not in OPTIONAL_PASSES or any(name == done for per in lowered for done, _ in per):
                parts = [_stage(per, name) for per in lowered]
                module = replace(parts[0], buffers=tuple(b for p in parts for b in p.buffers), context=())
                stages.append((name, _assemble(initialised, [p.body for p in parts], module)))
        module = stages[-1][1]
        # The values kept for later statements may leave too little room: then keep fewer of them
        # (no loop-invariant tiles; no GEMM results handed to maps), and at last none.
        tries = ({}, {"invariants": False}, {"invariants": False, "relayout": False})
        for forwarded in itertools.chain((forward_transfers(module, **keep) for keep in tries), [module]):
            try:
                planned = plan_local_memory(forwarded, machine)
            except Rejected:
                if forwarded is module:
                    raise
                continue
            if forwarded is not module:
                stages.append(("forward_transfers", forwarded))
            break
        stages.append(("plan_local_memory", planned))
    if verify.enabled():
        before = None  # the stage verified last
        for name, stage in stages:
            verify.verify(stage, name, verified=before)
            before = stage
    return stages


@functools.lru_cache(maxsize=4096)
def _lower_statement(module: Module, index: int, doubled: bool, machine: LocalMemoryMachine) -> Stages:
    """The stages of statement number `index` of a compute block, lowered on its own (`module` holds
    only that nest) with its buffers named `s<index>_...`. Candidates of an operator with several
    statements mostly differ in one statement: the others' lowerings are remembered, not redone."""
    return [(name, prefix_buffers(stage, f"s{index}_", index))
            for name, stage in _lower_nest(module, doubled, machine, optional_doubling=True, planned=False)]


def _assemble(structure: Module, bodies: list[Stmt], module: Module) -> Module:
    """`module` with the lowered nests `bodies` in the places of `structure`'s nests. The buffers of a
    nest inside a sequence loop are allocated once, before the kernel's statements."""
    top = structure.body.stmts if isinstance(structure.body, Seq) else (structure.body,)
    outside = {index for index, nest in enumerate(statements(structure)) if any(nest is stmt for stmt in top)}
    allocs: list[Stmt] = []

    def place(index: int, _: Stmt) -> list[Stmt]:
        body = bodies[index]
        if index in outside:
            return [body]
        stmts = body.stmts if isinstance(body, Seq) else (body,)
        count = len(list(takewhile(lambda stmt: isinstance(stmt, Alloc), stmts)))
        allocs.extend(stmts[:count])
        return list(stmts[count:])

    placed = map_statements(structure, place)
    return replace(module, body=seq(*allocs, placed.body))


def _stage(stages: Stages, name: str) -> Module:
    """The module after stage `name`, or after the last stage before it (a stage that did nothing)."""
    done = dict(stages)
    for earlier in reversed(NEST_PASSES[: NEST_PASSES.index(name) + 1]):
        if earlier in done:
            return done[earlier]
    raise KeyError(name)


def _lower_nest(module: Module, doubled: bool, machine: LocalMemoryMachine,
                optional_doubling: bool = False, planned: bool = True) -> Stages:
    """The passes on a module of one nest (its peeled copies come from it); without `planned`, all
    but `plan_local_memory` (a statement of several is planned with the others, once assembled)."""
    stages: Stages = []
    module = peel_boundaries(module)
    stages.append(("peel_boundaries", module))
    module = pad_primitive(module, machine)
    stages.append(("pad_primitive", module))
    if machine.skips_zero_tiles and (guarded := guard_padding(module)) is not module:
        module = guarded
        stages.append(("guard_padding", module))
    placed = infer_dma(module)
    stages.append(("infer_dma", placed))
    module = hoist_dma(module, machine, doubled, placed)
    stages.append(("hoist_dma", module))
    if (exchanged := exchange_transfers(module, machine)) is not module:
        module = exchanged
        stages.append(("exchange_transfers", module))
    if doubled:
        buffered = double_buffer(module)
        if buffered != module:
            module = buffered
            stages.append(("double_buffer", module))
        elif not optional_doubling:
            raise Rejected("no transfer inside a loop to double buffer")
    if machine.folds_zeros and (folded := fold_zeros(module)) is not module:
        module = folded
        stages.append(("fold_zeros", module))
    if planned:
        stages.append(("plan_local_memory", plan_local_memory(module, machine)))
    return stages


def before_double_buffering(stages: Stages) -> Module:
    """The last stage before `double_buffer`: the same transfers, each written once, which is what
    static counts of bytes moved read (double buffering moves the same bytes; later stages move none)."""
    candidates = [module for name, module in stages if name not in ("double_buffer", "fold_zeros", "plan_local_memory")]
    return candidates[-1]
