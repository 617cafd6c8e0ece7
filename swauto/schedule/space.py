"""Enumerate the schedule space of a bound operator and build the scheduled IR of each candidate."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from swauto.errors import Rejected, ScheduleError
from swauto.frontend.check import BoundOperator, SplitChoice
from swauto.ir import expr as ex
from swauto.ir.nodes import Module
from swauto.machine import SW26010
from swauto.schedule import transforms
from swauto.schedule.candidate import Candidate


def _extent(op: BoundOperator, split: SplitChoice) -> int:
    """The size a split divides: a primitive dimension or a loop's trip count, in the seed."""
    loops, call = transforms.loop_nest(op.seed.body)
    if split.on_primitive:
        return {"M": call.m, "N": call.n, "K": call.k}[split.target]
    loop = next(loop for loop in loops if loop.var == split.target)
    return ex.evaluate(loop.stop - loop.start, {})


def _check_split(op: BoundOperator, split: SplitChoice, factor: int) -> None:
    extent = _extent(op, split)
    if factor > extent:
        raise Rejected("tile larger than its dimension", f"{split.target} = {extent} < {factor}")
    if extent % factor:
        raise Rejected(
            "tile does not divide its dimension (boundary handling not implemented yet)",
            f"{split.target} = {extent} is not a multiple of {factor}",
        )


def apply(op: BoundOperator, candidate: Candidate, machine: SW26010) -> Module:
    """The scheduled IR of `candidate`: splits, then the loop order, then vectorization.
    Raises `Rejected` with the reason when the candidate is illegal."""
    splits = {s.target: s for s in op.space.splits}
    if set(splits) != {t for t, _ in candidate.splits}:
        raise Rejected("not in this space", "the candidate splits other loops or dimensions")
    module = op.seed
    for target, factor in candidate.splits:
        split = splits[target]
        if factor not in split.factors:
            raise Rejected("not in this space", f"{target} is not split by {factor} in the schedule block")
        _check_split(op, split, factor)
        if split.on_primitive:
            module = transforms.split_primitive(module, target, factor, split.outer)
        else:
            module = transforms.split_loop(module, target, factor, split.outer, split.inner or "")
    if sorted(candidate.order) != sorted(transforms.loop_order(module)):
        raise Rejected("not in this space", "the loop order names other loops")
    module = transforms.reorder(module, candidate.order)
    if candidate.vectorize not in op.space.vectorize:
        raise Rejected("not in this space", f"vectorizing {candidate.vectorize} is not allowed")
    module = transforms.vectorize(module, candidate.vectorize)
    _, call = transforms.loop_nest(module.body)
    violation = machine.gemm.violation(call.m, call.n, call.k, candidate.vectorize)
    if violation is not None:
        raise Rejected("primitive constraint", violation)
    return module


def candidates(op: BoundOperator) -> Iterator[Candidate]:
    """Every point of the space, legal or not, in a stable order."""
    space = op.space
    base = op.seed  # the nest with every split applied by factor 1: only the loop names matter here
    for split in space.splits:
        if split.on_primitive:
            base = transforms.split_primitive(base, split.target, 1, split.outer)
        else:
            base = transforms.split_loop(base, split.target, 1, split.outer, split.inner or "")
    base_order = transforms.loop_order(base)
    if space.order is not None:
        orders: Iterator[tuple[str, ...]] = iter([space.order])
    elif space.reorder_any:
        orders = itertools.permutations(base_order)
    else:
        orders = iter([base_order])
    order_list = list(orders)
    factor_sets = [[(s.target, f) for f in s.factors] for s in space.splits]
    for choice in itertools.product(*factor_sets):
        for order in order_list:
            for dim in space.vectorize:
                yield Candidate(tuple(choice), order, dim)


@dataclass
class Space:
    """The legal candidates of an operator and how many candidates each reason rejected."""

    operator: BoundOperator
    legal: list[tuple[Candidate, list[tuple[str, Module]]]] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return len(self.legal) + sum(self.rejected.values())

    @property
    def candidates(self) -> list[Candidate]:
        return [candidate for candidate, _ in self.legal]


def explore(op: BoundOperator, machine: SW26010) -> Space:
    """Build every candidate through the pass pipeline; keep the legal ones with their IR stages."""
    from swauto.pipeline import lower

    space = Space(op)
    for candidate in candidates(op):
        try:
            space.legal.append((candidate, lower(op, candidate, machine)))
        except Rejected as rejection:
            space.rejected[rejection.reason] += 1
    if not space.legal:
        raise ScheduleError(_explain_empty(op, space))
    return space


def _explain_empty(op: BoundOperator, space: Space) -> str:
    """Why nothing is legal, naming the dimension when a split cannot be used at all."""
    for split in op.space.splits:
        extent = _extent(op, split)
        factors = ", ".join(map(str, split.factors))
        if all(f > extent for f in split.factors):
            return (f"{split.target} = {extent} is smaller than every tile size in {{{factors}}}; "
                    f"add a tile size that divides {extent}")
        if all(extent % f for f in split.factors):
            return (f"{split.target} = {extent} is not a multiple of any tile size in {{{factors}}}: "
                    f"sizes the tiles do not divide need boundary handling, which swauto does not have yet")
    reasons = "; ".join(f"{reason}: {count}" for reason, count in space.rejected.most_common())
    return f"no legal candidate among {space.total} for operator {op.name} with {op.params} ({reasons})"
