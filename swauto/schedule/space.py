"""Enumerate the schedule space of a bound operator and build the scheduled IR of each candidate."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from swauto.errors import Rejected, ScheduleError
from swauto.frontend.check import BoundOperator, SplitChoice
from swauto.frontend.integers import check_integer
from swauto.ir import expr as ex
from swauto.ir.nodes import Module
from swauto.machine import LocalMemoryMachine
from swauto.schedule import transforms
from swauto.schedule.candidate import Candidate
from swauto.schedule.fusion import fuse_consumers

# The most candidates `explore` builds unless told otherwise (`max_candidates=`, `--max-candidates`).
# The project's largest spaces have a few thousand (conv2d.sw with a choice of the weight's layout:
# 2304 on either target); a seed with 9 loops under `reorder any` has 9! orders alone, which takes
# minutes and gigabytes to build.
MAX_CANDIDATES = 100_000


def _extent(op: BoundOperator, split: SplitChoice) -> int:
    """The size a split cuts: a primitive dimension or a loop's trip count, in the seed."""
    loops, call = transforms.loop_nest(transforms.statements(op.seed)[split.statement])
    if split.on_primitive:
        return call.size(split.dim or split.target)  # type: ignore[return-value]
    loop = next(loop for loop in loops if loop.var == split.target)
    return ex.evaluate(loop.stop - loop.start, {})


def apply(op: BoundOperator, candidate: Candidate, machine: LocalMemoryMachine) -> Module:
    """The scheduled IR of `candidate`: splits, fusions, loop order, layouts, vectorization.
    Raises `Rejected` with the reason when the candidate is illegal."""
    space = op.space
    splits = {s.target: s for s in space.splits}
    if set(splits) != {t for t, _ in candidate.splits}:
        raise Rejected("not in this space", "the candidate splits other loops or dimensions")
    module = op.seed
    for split in space.splits:  # in directive order: loop names depend on it
        factor = dict(candidate.splits)[split.target]
        if factor not in split.factors:
            raise Rejected("not in this space", f"{split.target} is not split by {factor} in the schedule block")
        extent = _extent(op, split)
        if factor > extent:
            raise Rejected("tile larger than its dimension", f"{split.target} = {extent} < {factor}")
        if split.on_primitive:
            module = transforms.split_primitive(module, split.dim or split.target, factor, split.outer, split.statement)
        else:
            module = transforms.split_loop(module, split.target, factor, split.outer, split.inner or "")
    for fuse in space.fuses:
        if fuse.into_dim is not None:
            module = transforms.fuse_into_primitive(module, fuse.loop, fuse.into_dim, fuse.statement)
        else:
            module = transforms.fuse_loops(module, fuse.loop, fuse.with_loop or "", fuse.fused or "")
    if sorted(candidate.order) != sorted(transforms.loop_order(module)):
        raise Rejected("not in this space", "the loop order names other loops")
    module = transforms.reorder(module, candidate.order)
    choices = {layout.tensor: layout.permutations for layout in space.layouts}
    if {t for t, _ in candidate.layouts} != set(choices):
        raise Rejected("not in this space", "the candidate lays out other tensors")
    for tensor, permutation in candidate.layouts:
        if permutation not in choices[tensor]:
            raise Rejected("not in this space", f"layout {list(permutation)} of {tensor} is not a choice")
        module = transforms.set_layout(module, tensor, permutation)
    if candidate.vectorize not in space.vectorize:
        raise Rejected("not in this space", f"vectorizing {candidate.vectorize} is not allowed")
    for statement, nest in enumerate(transforms.statements(module)):
        call = transforms.loop_nest(nest)[1]
        if call.signature.kind != "gemm":
            continue
        module = transforms.vectorize(module, candidate.vectorize, statement)
        # A tile size the schedule asks for must suit the primitive; sizes the seed fixes are padded later.
        tiles = {"M": 0, "N": 0, "K": 0}
        for target, factor in candidate.splits:
            split = splits[target]
            if split.on_primitive and split.statement == statement:
                tiles[split.dim or target] = factor
        violation = machine.gemm.violation(tiles["M"], tiles["N"], tiles["K"], candidate.vectorize)
        if violation is not None:
            raise Rejected("primitive constraint", violation)
    names = {fusion.name: fusion for fusion in space.fusions}
    if not set(candidate.fused) <= set(names):
        raise Rejected("not in this space", f"the schedule block fuses none of {', '.join(candidate.fused)}")
    if candidate.fused:
        pairs = [(names[name].consumer, names[name].producer) for name in sorted(candidate.fused,
                                                                               key=lambda n: names[n].consumer)]
        module = fuse_consumers(module, op.seed, pairs)
    if candidate.micro_kernel is not None and candidate.micro_kernel not in machine.micro_kernels:
        raise Rejected("not in this space", "this target has no micro-kernel of {} rows x {} vectors".format(
            *candidate.micro_kernel))
    return module


def _orders(op: BoundOperator) -> Iterable[tuple[str, ...]]:
    """The loop orders of the space (lazily: there may be n! of them)."""
    space = op.space
    if space.order is not None:
        return [space.order]
    if space.reorder_any:  # each statement's loops in any order
        return _concatenated_permutations(space.nests or (space.loops,))
    return [space.loops]


def _concatenated_permutations(nests: tuple[tuple[str, ...], ...]) -> Iterator[tuple[str, ...]]:
    """Every order of each nest's loops, nest after nest, generated lazily (itertools.product would
    list every permutation of each nest first)."""
    if not nests:
        yield ()
        return
    for first in itertools.permutations(nests[0]):
        for rest in _concatenated_permutations(nests[1:]):
            yield first + rest


def candidates(op: BoundOperator, double_buffering: tuple[bool, ...] = (False, True)) -> Iterator[Candidate]:
    """Every point of the space, legal or not, in a stable order; single and double buffered, or
    only as `double_buffering` says. Nothing is materialized: the points come one at a time."""
    space = op.space
    factor_sets = [[(s.target, f) for f in s.factors] for s in space.splits]
    layout_sets = [[(layout.tensor, p) for p in layout.permutations] for layout in space.layouts]
    for fused in _fusion_choices(op):
        for choice in itertools.product(*factor_sets):
            for order in _orders(op):
                if fused and not _default_choices(op, fused, dict(choice), order):
                    continue  # a fused statement's own tiles and loops are gone: one candidate stands for all
                for layouts in itertools.product(*layout_sets):
                    for dim in space.vectorize:
                        for double_buffer in double_buffering:
                            yield Candidate(tuple(choice), order, dim, tuple(layouts), double_buffer, fused=fused)


def _fusion_choices(op: BoundOperator) -> list[tuple[str, ...]]:
    """Which statements are fused into their producers: per producer, its first k consumers, for every k."""
    chains: dict[int, list[str]] = {}
    for fusion in op.space.fusions:
        chains.setdefault(fusion.producer, []).append(fusion.name)
    prefixes = [[tuple(chain[:k]) for k in range(len(chain) + 1)] for chain in chains.values()]
    return [tuple(name for part in parts for name in part) for parts in itertools.product(*prefixes)]


def _default_choices(op: BoundOperator, fused: tuple[str, ...], splits: dict[str, int], order: tuple[str, ...]) -> bool:
    """Whether the fused statements' own splits and loop orders are the space's first ones."""
    space = op.space
    statements = {f.consumer for f in space.fusions if f.name in fused}
    for split in space.splits:
        if split.statement in statements and splits[split.target] != split.factors[0]:
            return False
    for statement in statements:
        loops = space.nests[statement]
        if tuple(name for name in order if name in loops) != loops:
            return False
    return True


def count(op: BoundOperator, machine: LocalMemoryMachine) -> tuple[int, list[str]]:
    """How many candidates `explore` builds for `machine` (micro-kernels included, as `Space.total`
    counts them), without building any; and the factors of that product, in words."""
    space = op.space
    factors: list[tuple[int, str]] = []
    for split in space.splits:
        factors.append((len(split.factors), f"{len(split.factors)} tile sizes of {split.target}"))
    if space.order is None and space.reorder_any:
        for loops in space.nests or (space.loops,):
            n = len(loops)
            factors.append((math.factorial(n), f"{n}! = {math.factorial(n):,} loop orders"))
    for layout in space.layouts:
        factors.append((len(layout.permutations), f"{len(layout.permutations)} layouts of {layout.tensor}"))
    factors.append((len(space.vectorize), f"{len(space.vectorize)} vectorized dimensions"))
    fusions = len(_fusion_choices(op))
    factors.append((fusions, f"{fusions} fusion choices"))
    if machine.asynchronous_dma:
        factors.append((2, "2 bufferings (single, double)"))
    if machine.micro_kernels:
        factors.append((len(machine.micro_kernels), f"{len(machine.micro_kernels)} micro-kernels"))
    return math.prod(n for n, _ in factors), [words for n, words in factors if n != 1]


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

    def lowerings(self) -> Iterator[tuple[list[tuple[str, Module]], list[Candidate]]]:
        """Each lowering (its stages) with the legal candidates that share it, in the space's order."""
        group: list[Candidate] = []
        for index, (candidate, stages) in enumerate(self.legal):
            group.append(candidate)
            if index + 1 == len(self.legal) or self.legal[index + 1][1] is not stages:
                yield stages, group
                group = []


def explore(op: BoundOperator, machine: LocalMemoryMachine, progress=None,
            max_candidates: int = MAX_CANDIDATES) -> Space:
    """Build every candidate through the pass pipeline; keep the legal ones with their IR stages.
    `progress`, if given, wraps the candidate iterator (e.g. a progress bar). A space of more than
    `max_candidates` candidates is refused with a ScheduleError before anything is built.

    Double buffering is explored only where DMAs are asynchronous. The machine's micro-kernel choices
    multiply the space, but they shape only the backend's code: the candidates differing in them
    alone share one lowering (and one list of stages)."""
    from swauto.pipeline import lower

    max_candidates = check_integer(max_candidates, "max_candidates", 1)
    total, factors = count(op, machine)
    if total > max_candidates:
        raise ScheduleError(
            f"the schedule space of operator {op.name} has {total:,} candidates ({' x '.join(factors)}), more "
            f"than the bound of {max_candidates:,}; narrow the schedule block (fewer tile sizes, a fixed "
            f"`reorder {{...}}`) or raise the bound (--max-candidates N, max_candidates=N)"
        )
    space = Space(op)
    points = candidates(op, (False, True) if machine.asynchronous_dma else (False,))
    micro_kernels = machine.micro_kernels or (None,)
    for candidate in progress(points) if progress else points:
        try:
            stages = lower(op, candidate, machine)
        except Rejected as rejection:
            space.rejected[rejection.reason] += len(micro_kernels)
            continue
        space.legal.extend((replace(candidate, micro_kernel=micro_kernel), stages) for micro_kernel in micro_kernels)
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
                    f"add a tile size of at most {extent}")
    reasons = "; ".join(f"{reason}: {count}" for reason, count in space.rejected.most_common())
    return f"no legal candidate among {space.total} for operator {op.name} with {op.params} ({reasons})"
