"""The schedule space of a bound operator: its points (`candidates`) and the scheduled IR of each (`apply`)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import replace

from swauto.errors import Rejected
from swauto.frontend.check import BoundOperator, FuseChoice, ScheduleSpace, SplitChoice
from swauto.ir import expr as ex
from swauto.ir.nests import loop_nest, replace_statements, statements
from swauto.ir.nodes import Module, Stmt, Tensor
from swauto.machine import GemmConstraints, LocalMemoryMachine
from swauto.schedule import transforms
from swauto.schedule.candidate import Candidate
from swauto.schedule.fusion import fuse_consumers


def split_extent(op: BoundOperator, split: SplitChoice) -> int:
    """The size a split cuts: a primitive dimension or a loop's trip count, in the seed."""
    loops, call = loop_nest(statements(op.seed)[split.statement])
    if split.on_primitive:
        return call.size(split.dim)  # type: ignore[arg-type, return-value]
    loop = next(loop for loop in loops if loop.var == split.target)
    return ex.evaluate(loop.stop - loop.start, {})


def tile_sizes(split: SplitChoice, extent: int) -> tuple[int, ...]:
    """The tile sizes a split of `extent` elements may take: those the schedule block offers, a size
    beyond the extent meaning one tile of the whole extent (so a `.sw` written for large sizes
    compiles for small ones, and `{256, 512}` at 384 offers blocks of 256 or none)."""
    return tuple(dict.fromkeys(min(f, extent) for f in split.factors))


def apply(op: BoundOperator, candidate: Candidate, machine: LocalMemoryMachine) -> Module:
    """The scheduled IR of `candidate`: splits, fusions, loop order, layouts, vectorization.
    Raises `Rejected` with the reason when the candidate is illegal.

    Each statement is scheduled on its own from the choices that touch it (`_scheduled_nest`,
    remembered: the candidates of an operator with several statements mostly differ in one), then
    consumers are fused into their producers."""
    space = op.space
    splits = {s.target: s for s in space.splits}
    if set(splits) != {t for t, _ in candidate.splits}:
        raise Rejected("not in this space", "the candidate splits other loops or dimensions")
    factors = dict(candidate.splits)
    for split in space.splits:
        extent = split_extent(op, split)
        if factors[split.target] not in tile_sizes(split, extent):
            raise Rejected("not in this space", f"{split.target} = {extent} is not split by {factors[split.target]} "
                                                "in this space")
    if sorted(candidate.order) != sorted(space.loops):
        raise Rejected("not in this space", "the loop order names other loops")
    choices = {layout.tensor: layout.permutations for layout in space.layouts}
    if {t for t, _ in candidate.layouts} != set(choices):
        raise Rejected("not in this space", "the candidate lays out other tensors")
    for tensor, permutation in candidate.layouts:
        if permutation not in choices[tensor]:
            raise Rejected("not in this space", f"layout {list(permutation)} of {tensor} is not a choice")
    if candidate.vectorize not in space.vectorize:
        raise Rejected("not in this space", f"vectorizing {candidate.vectorize} is not allowed")
    names = {fusion.name: fusion for fusion in space.fusions}
    if not set(candidate.fused) <= set(names):
        raise Rejected("not in this space", f"the schedule block fuses none of {', '.join(candidate.fused)}")
    if candidate.micro_kernel is not None and candidate.micro_kernel not in machine.micro_kernels:
        raise Rejected("not in this space", "this target has no micro-kernel of {} rows x {} vectors".format(
            *candidate.micro_kernel))
    nests = []
    for index, nest in enumerate(statements(op.seed)):
        loops = set(space.nests[index])
        used = _tensors(nest)
        nests.append(_scheduled_nest(
            replace(op.seed, body=nest),
            tuple((split, factors[split.target]) for split in space.splits if split.statement == index),
            tuple(fuse for fuse in space.fuses if _statement_of(fuse, space) == index),
            tuple(name for name in candidate.order if name in loops),
            tuple((tensor, perm) for tensor, perm in candidate.layouts if tensor in used),
            candidate.vectorize, machine.gemm))
    module = replace_statements(replace(op.seed, tensors=_laid_out(op.seed, candidate.layouts)), nests)
    if candidate.fused:
        pairs = [(names[name].consumer, names[name].producer) for name in sorted(candidate.fused,
                                                                               key=lambda n: names[n].consumer)]
        module = fuse_consumers(module, op.seed, pairs)
    return module


@functools.lru_cache(maxsize=256)
def _laid_out(seed: Module, layouts: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[Tensor, ...]:
    """`seed`'s tensors in `layouts` (the nests are laid out one by one, `_scheduled_nest`)."""
    for tensor, permutation in layouts:
        seed = transforms.set_layout(seed, tensor, permutation)
    return seed.tensors


@functools.lru_cache(maxsize=4096)
def _scheduled_nest(seed: Module, splits: tuple[tuple[SplitChoice, int], ...],
                    fuses: tuple[FuseChoice, ...], order: tuple[str, ...],
                    layouts: tuple[tuple[str, tuple[int, ...]], ...], vectorize: str, gemm: GemmConstraints) -> Stmt:
    """The statement that is `seed`'s only nest with its own splits (each with its tile size),
    fusions, loop order and the layouts of the tensors it touches, and, for a GEMM, the vectorized
    dimension, whose tile sizes must suit the primitive."""
    module = transforms.drop_single_trip_loops(transforms.reorder(_tiled(seed, splits, fuses), order))
    for tensor, permutation in layouts:
        module = transforms.set_layout(module, tensor, permutation)
    if loop_nest(module.body)[1].signature.kind == "gemm":
        module = transforms.vectorize(module, vectorize, 0)
        # A tile size the schedule asks for must suit the primitive; sizes the seed fixes (and a whole
        # dimension smaller than every tile size) are padded later.
        sizes = {"M": 0, "N": 0, "K": 0}
        for split, factor in splits:
            if split.on_primitive and factor in split.factors:
                sizes[split.dim] = factor  # type: ignore[index]
        violation = gemm.violation(sizes["M"], sizes["N"], sizes["K"], vectorize)
        if violation is not None:
            raise Rejected("primitive constraint", violation)
    return module.body


@functools.lru_cache(maxsize=1024)
def _tiled(seed: Module, splits: tuple[tuple[SplitChoice, int], ...], fuses: tuple[FuseChoice, ...]) -> Module:
    """`seed` split and fused (`_scheduled_nest` before reordering): shared by the tile classes that
    differ only in layouts, vectorization and orders."""
    module = seed
    for split, factor in splits:  # in directive order: loop names depend on it
        if split.on_primitive:
            module = transforms.split_primitive(module, split.dim, factor, split.outer, 0)  # type: ignore[arg-type]
        else:
            module = transforms.split_loop(module, split.target, factor, split.outer, split.inner or "")
    for fuse in fuses:
        if fuse.into_dim is not None:
            module = transforms.fuse_into_primitive(module, fuse.loop, fuse.into_dim, 0)
        else:
            module = transforms.fuse_loops(module, fuse.loop, fuse.with_loop or "", fuse.fused or "")
    return module


def _statement_of(fuse: FuseChoice, space: ScheduleSpace) -> int:
    """The statement a fusion of loops belongs to."""
    if fuse.into_dim is not None:
        return fuse.statement
    return next(index for index, loops in enumerate(space.nests) if fuse.fused in loops)


def _tensors(nest: Stmt) -> set[str]:
    return {access.name for _, access in loop_nest(nest)[1].operands}


def single_trip_loops(op: BoundOperator, factors: dict[str, int]) -> frozenset[str]:
    """The loops of the space that run once with these tile sizes (a split whose tile covers its
    extent, a kernel loop of a 1 x 1 convolution). Where such a loop sits in a nest changes nothing, so
    `reorder any` places them outermost instead of counting each of their positions as a candidate."""
    trips: dict[str, int | None] = {}
    for nest in statements(op.seed):
        for loop in loop_nest(nest)[0]:
            trips[loop.var] = ex.constant_value(loop.stop - loop.start) if loop.stride == 1 else None
    for split in op.space.splits:  # in directive order: a split may cut a loop an earlier one made
        extent = split_extent(op, split) if split.on_primitive else trips.pop(split.target, None)
        factor = factors.get(split.target)
        if extent is None or factor is None:
            trips[split.outer] = None
            continue
        trips[split.outer] = -(-extent // factor)
        if split.inner:
            trips[split.inner] = min(factor, extent)
    for fuse in op.space.fuses:
        first = trips.pop(fuse.loop, None)
        if fuse.into_dim is None and fuse.fused is not None:
            second = trips.pop(fuse.with_loop or "", None)
            trips[fuse.fused] = None if first is None or second is None else first * second
    return frozenset(name for name in op.space.loops if trips.get(name) == 1)


def _orders(op: BoundOperator, single: frozenset[str] = frozenset()) -> Iterable[tuple[str, ...]]:
    """The loop orders of the space (lazily: there may be n! of them); under `reorder any`, the loops
    that run once (`single`) come first in each nest, in its order, then the loops pinned outermost,
    every order of the others, and the loops pinned innermost."""
    space = op.space
    if space.order is not None:
        return [space.order]
    if space.reorder_any:  # those statements' loops in any order
        return _concatenated_permutations(op, set(space.reorder_any), single)
    return [space.loops]


def order_count(op: BoundOperator, single: frozenset[str] = frozenset()) -> int:
    """How many orders `_orders` gives."""
    space = op.space
    if space.order is not None or not space.reorder_any:
        return 1
    return math.prod(math.factorial(len(_nest_order(op, index, single)[1])) for index in set(space.reorder_any))


def _nest_order(op: BoundOperator, index: int, single: frozenset[str]) -> tuple[tuple[str, ...], ...]:
    """The loops of reordered nest `index` as (those that come first, those in any order, those that
    come last)."""
    nest = op.space.nests[index]
    pins = [(name, place) for name, place in op.space.pins if name in nest and name not in single]
    first = tuple(name for name in nest if name in single) + tuple(n for n, place in pins if place == "outermost")
    last = tuple(name for name, place in pins if place == "innermost")
    return first, tuple(name for name in nest if name not in first and name not in last), last


def _concatenated_permutations(op: BoundOperator, free: set[int], single: frozenset[str],
                               first: int = 0) -> Iterator[tuple[str, ...]]:
    """Every order of the loops of each nest in `free` (the others in their order; see `_orders`), nest
    after nest, generated lazily (itertools.product would list every permutation of each nest first)."""
    nests = op.space.nests
    if first == len(nests):
        yield ()
        return
    if first in free:
        head, middle, tail = _nest_order(op, first, single)
        orders: Iterable[tuple[str, ...]] = (head + order + tail for order in itertools.permutations(middle))
    else:
        orders = [nests[first]]
    for order in orders:
        for rest in _concatenated_permutations(op, free, single, first + 1):
            yield order + rest


def candidates(op: BoundOperator, double_buffering: tuple[bool, ...] = (False, True),
               vectorized: tuple[str, ...] | None = None) -> Iterator[Candidate]:
    """Every point of the space, legal or not, in a stable order; single and double buffered, or
    only as `double_buffering` says; vectorizing each dimension the space offers, or only `vectorized`.
    Nothing is materialized: the points come one at a time."""
    space = op.space
    layout_sets = [[(layout.tensor, p) for p in layout.permutations] for layout in space.layouts]
    for fused, choice, orders in _tile_choices(op):
        for order in orders:
            for layouts in itertools.product(*layout_sets):
                for dim in vectorized or space.vectorize:
                    for double_buffer in double_buffering:
                        yield Candidate(choice, order, dim, tuple(layouts), double_buffer, fused=fused)


def tile_classes(op: BoundOperator, vectorized: tuple[str, ...] | None = None
                 ) -> Iterator[tuple[Candidate, Iterable[tuple[str, ...]]]]:
    """The space's points grouped by everything but their loop order and buffering (a *tile class*:
    the same tiles, layouts and vectorized dimension): per class, its candidate with the first order,
    single buffered, and every order it takes (lazily). `candidates` lists the same points (with the
    same `vectorized`)."""
    space = op.space
    layout_sets = [[(layout.tensor, p) for p in layout.permutations] for layout in space.layouts]
    for fused, choice, orders in _tile_choices(op):
        orders = list(orders)
        if not orders:
            continue
        for layouts in itertools.product(*layout_sets):
            for dim in vectorized or space.vectorize:
                yield Candidate(choice, orders[0], dim, tuple(layouts), fused=fused), orders


def _tile_choices(op: BoundOperator) -> Iterator[tuple[tuple[str, ...], tuple[tuple[str, int], ...],
                                                       Iterator[tuple[str, ...]]]]:
    """Per fusion choice and choice of tile sizes: the loop orders it takes (lazily; a fused statement's
    own tiles and loops are gone, so one of them stands for all)."""
    space = op.space
    factor_sets = [[(s.target, f) for f in tile_sizes(s, split_extent(op, s))] for s in space.splits]
    for fused in fusion_choices(op):
        for choice in itertools.product(*factor_sets):
            single = single_trip_loops(op, dict(choice))
            orders = _orders(op, single)
            if fused:
                consumers = _consumers(op, fused)
                orders = (order for order in orders if _default_orders(op, consumers, order, single)) \
                    if _default_splits(op, consumers, dict(choice)) else ()
            yield fused, tuple(choice), iter(orders)


def fusion_choices(op: BoundOperator) -> list[tuple[str, ...]]:
    """Which statements are fused into their producers: per producer, its first k consumers, for every k."""
    chains: dict[int, list[str]] = {}
    for fusion in op.space.fusions:
        chains.setdefault(fusion.producer, []).append(fusion.name)
    prefixes = [[tuple(chain[:k]) for k in range(len(chain) + 1)] for chain in chains.values()]
    return [tuple(name for part in parts for name in part) for parts in itertools.product(*prefixes)]


def fused_order_count(op: BoundOperator, fused: tuple[str, ...], splits: dict[str, int]) -> int:
    """How many loop orders `_tile_choices` gives fusion choice `fused` at tile sizes `splits`, without
    listing them: a fused statement's own splits and orders are its first ones."""
    space = op.space
    consumers = _consumers(op, fused)
    if not _default_splits(op, consumers, splits):
        return 0
    single = single_trip_loops(op, splits)
    if space.order is not None:
        return int(_default_orders(op, consumers, space.order, single))
    count = order_count(op, single)
    for statement in consumers & set(space.reorder_any):
        count //= math.factorial(len(_nest_order(op, statement, single)[1]))  # the first of its orders
    return count


def _consumers(op: BoundOperator, fused: tuple[str, ...]) -> set[int]:
    """The statements fused into their producers (by index)."""
    return {f.consumer for f in op.space.fusions if f.name in fused}


def _default_splits(op: BoundOperator, consumers: set[int], splits: dict[str, int]) -> bool:
    """Whether the fused statements' own splits are the space's first ones (their tiles are gone)."""
    return all(splits[split.target] == tile_sizes(split, split_extent(op, split))[0]
               for split in op.space.splits if split.statement in consumers)


def _default_orders(op: BoundOperator, consumers: set[int], order: tuple[str, ...], single: frozenset[str]) -> bool:
    """Whether the fused statements' own loops come in the space's first order (their loops are gone)."""
    space = op.space
    for statement in consumers:
        loops = space.nests[statement]
        first = sum(_nest_order(op, statement, single), ()) if statement in space.reorder_any else loops
        if tuple(name for name in order if name in loops) != first:
            return False
    return True
