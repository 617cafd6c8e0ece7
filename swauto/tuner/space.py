"""The space driver: every candidate of an operator built through the pipeline, the legal ones kept
with their IR stages and the others counted by reason (what the tuners rank)."""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from swauto.errors import Rejected, ScheduleError
from swauto.frontend.check import BoundOperator
from swauto.frontend.integers import check_integer
from swauto.ir.nodes import Call, Module
from swauto.ir.visitor import walk
from swauto.machine import LocalMemoryMachine
from swauto.pipeline import Stages, lower
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import (
    candidates,
    fused_order_count,
    fusion_choices,
    split_extent,
    tile_classes,
    tile_sizes,
)
from swauto.tuner.sketch import Sketch, Sketcher, SketchModel

# The most candidates `explore` builds unless told otherwise (`max_candidates=`, `--max-candidates`).
# The project's largest spaces have a few thousand (conv2d.sw with a choice of the weight's layout:
# 2304 on either target); a seed with 9 loops under `reorder any` has 9! orders alone, which takes
# minutes and gigabytes to build.
MAX_CANDIDATES = 100_000
# How many legal candidates `explore_ranked` lowers: those whose sketches the model prices fastest, at most
# LOWERED_PER_TILES with the same tile sizes (of any order and layouts), as many with each buffering, unless
# fewer than LOWERED would be legal so (few tile sizes fit). A sketch prices those against each other
# closely, but tiles with short last ones only to a few percent against others, so the next tile sizes get
# their turn: on a 10 x 10 image at stride 2 and B = 1, with tiles of padding skipped, the best host
# candidate (4 columns x 1 row per GEMM) came after 16 candidates of 4 columns x 5 rows, whose sketches
# priced them 5% too low, and the pick was 3% slower than it. Nor does it see the peeled copies' transfers
# that a single-buffered candidate waits for in place: on the SW26010, conv2d_bias_relu at B = 1, 56 x 56
# (tiles of 32 columns, a last one of 24), the single-buffered sketches priced 0.3% below the
# double-buffered one, whose real IR runs in 0.50 ms against their 0.70 (simulated), and took all the
# lowering of those tiles.
LOWERED = 16
LOWERED_PER_TILES = 4
# The kinds of `explore_ranked`'s queue entries, in the order they go at one figure.
GROUP, OPEN, PRICE, LOWER = 0, 1, 2, 3


def count(op: BoundOperator, machine: LocalMemoryMachine) -> tuple[int, list[str]]:
    """How many candidates `explore` builds for `machine` (micro-kernels included, as `Space.total`
    counts them), without building any; and the factors of that product, in words."""
    space = op.space
    factors: list[tuple[int, str]] = []
    sizes = [tile_sizes(split, split_extent(op, split)) for split in space.splits]
    # Loops of one iteration take no part in the orders, so the orders may depend on the tile sizes; a
    # fused statement's own tiles and loops are not chosen.
    fusions = fusion_choices(op)
    orders_of = {fused: [fused_order_count(op, fused, {split.target: size for split, size in
                                                       zip(space.splits, choice, strict=True)})
                         for choice in itertools.product(*sizes)] for fused in fusions}
    orders = orders_of[fusions[0]]
    if any(counts != orders for counts in orders_of.values()):
        total = sum(sum(counts) for counts in orders_of.values())
        factors.append((total, f"{len(fusions)} fusion choices with {total:,} choices of tile sizes and loop orders "
                               "in all (a fused statement's own are not chosen)"))
    elif len(set(orders)) == 1:
        for split, offered in zip(space.splits, sizes, strict=True):
            factors.append((len(offered), f"{len(offered)} tile sizes of {split.target}"))
        free = [len(space.nests[statement]) for statement in space.reorder_any] if space.order is None else []
        if len(free) == 1 and orders[0] == math.factorial(free[0]):
            factors.append((orders[0], f"{free[0]}! = {orders[0]:,} loop orders"))
        else:
            factors.append((orders[0], f"{orders[0]:,} loop orders"))
    else:
        factors.append((sum(orders), f"{len(orders)} choices of tile sizes with {sum(orders):,} loop orders in all "
                                     "(loops that run once take no part in them)"))
    for layout in space.layouts:
        factors.append((len(layout.permutations), f"{len(layout.permutations)} layouts of {layout.tensor}"))
    dims = len(vectorized(op, machine))
    factors.append((dims, f"{dims} vectorized dimensions"))
    if all(counts == orders for counts in orders_of.values()):
        factors.append((len(fusions), f"{len(fusions)} fusion choices"))
    if machine.asynchronous_dma:
        factors.append((2, "2 bufferings (single, double)"))
    tiles = micro_kernels(op, machine)
    if tiles != (None,):
        factors.append((len(tiles), f"{len(tiles)} micro-kernels"))
    return math.prod(n for n, _ in factors), [words for n, words in factors if n != 1]


def micro_kernels(op: BoundOperator, machine: LocalMemoryMachine) -> tuple[tuple[int, int] | None, ...]:
    """The register tiles each program of `op` is built in: the machine's where `op` calls a GEMM; where it
    calls only maps, reductions and transforms, whose code no register tile shapes, none: one candidate
    per program (MobileNetV2 block2.1.depthwise at B = 8 on the host: 8280 candidates were 2760 programs
    in three tiles each, and the same program's three timed 1.32, 1.92 and 2.01 ms in one tuning run)."""
    calls_gemm = any(isinstance(node, Call) and node.signature.kind == "gemm" for node, _ in walk(op.seed.body))
    return (machine.micro_kernels or (None,)) if calls_gemm else (None,)


def vectorized(op: BoundOperator, machine: LocalMemoryMachine) -> tuple[str, ...]:
    """The vectorized dimensions explored on `machine`: the space's, or its first alone where the
    machine takes the dimension from C's layout (the others would build the same programs again)."""
    return op.space.vectorize[:1] if machine.vector_dim_from_layout else op.space.vectorize


@dataclass
class Space:
    """The legal candidates of an operator and how many candidates each reason rejected."""

    operator: BoundOperator
    legal: list[tuple[Candidate, list[tuple[str, Module]]]] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    # Candidates `explore_ranked` ranked out without lowering them: by their sketch's price, by one of the
    # same signature, or by their tile class's bound.
    sketched: int = 0

    @property
    def total(self) -> int:
        return len(self.legal) + sum(self.rejected.values()) + self.sketched

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

    Double buffering is explored only where DMAs are asynchronous, and only the first vectorized
    dimension the space offers where the machine takes it from C's layout. The machine's micro-kernel choices
    multiply the space where the operator calls a GEMM (`micro_kernels`), but they shape only the backend's
    code: the candidates differing in them alone share one lowering (and one list of stages)."""
    _check_size(op, machine, max_candidates)
    space = Space(op)
    register_tiles = micro_kernels(op, machine)
    points = candidates(op, (False, True) if machine.asynchronous_dma else (False,), vectorized(op, machine))
    for candidate in progress(points) if progress else points:
        space.legal += _lowered(op, candidate, machine, space, register_tiles)
    if not space.legal:
        raise ScheduleError(_explain_empty(op, space))
    return space


def _check_size(op: BoundOperator, machine: LocalMemoryMachine, max_candidates: int) -> int:
    """The space's size (`count`); refuse a space of more than `max_candidates` candidates before
    anything is built."""
    max_candidates = check_integer(max_candidates, "max_candidates", 1)
    total, factors = count(op, machine)
    if total > max_candidates:
        raise ScheduleError(
            f"the schedule space of operator {op.name} has {total:,} candidates ({' x '.join(factors)}), more "
            f"than the bound of {max_candidates:,}; narrow the schedule block (fewer tile sizes, a fixed "
            f"`reorder {{...}}`) or raise the bound (--max-candidates N, max_candidates=N)"
        )
    return total


@contextmanager
def _cycle_collector_paused() -> Iterator[None]:
    """Ranking a space allocates millions of short-lived IR nodes, freed by reference counting; the
    cyclic collector's passes over the growing heap took a third of model tuning (1.4 s against 0.93
    s on a space of 13 056 candidates). The cycles it leaves (some ten thousand objects per tuning)
    are collected once it runs again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def explore_ranked(op: BoundOperator, machine: LocalMemoryMachine, model: SketchModel,
                   lowered: int = LOWERED, max_candidates: int = MAX_CANDIDATES) -> Space:
    """Rank before lowering: candidates are lowered from the cheapest sketch (`swauto.tuner.sketch`)
    on, priced by `model.price` times its share of work (its last tiles weighed by `model.call_seconds`),
    until `lowered` of them are legal, at most LOWERED_PER_TILES with the same tile sizes, as many with
    each buffering, and one per program (`_program`); the rest are counted in `Space.sketched`. The
    model tuner ranks the lowered ones on their real IR.

    Work is shared and skipped where that cannot change which candidates are lowered:
    - a tile class (the candidates that differ only in loop order and buffering) is scheduled once;
      its sketches are built only when its *bound* is below the price of every candidate still to
      lower: no sketch of the class can be cheaper than that (classes are opened cheapest bound
      first). The bound is `model.bound` of the class's nest with no transfer (`Sketcher.compute_nest`)
      and the fewest bytes any placement moves (`Sketcher.least_bytes`), times its share of work;
    - a sketch's module is built and priced only when the bound of the bytes its placement moves
      (`Placement.moved`) is below the price of every candidate still to lower;
    - tile classes that differ only in their fused consumers are bounded as a group (`_group_bound`)
      until that bound comes up, each then on its own (with a model whose price ignores the order of
      loops without transfers);
    - a tile class whose layouts differ from those of a class already queued only in where axes of
      extent 1 go (`_tile_memory`: the same memory, so the same programs) is skipped;
    - of sketches with one signature (the same nest up to the order of loops with no transfer
      between them; `model.commuting`: its price is unchanged by that order), one is priced, and lowered
      until one is legal: the others are the same program to the model. (Their real IR may differ
      where tiles are peeled, so an illegal one does not stand for them.)

    A candidate of a main nest and maps is ranked by its main nest's placement and the maps' sketches
    (`Sketcher.rest_seconds`; bounded by the maps' least seconds); the other candidates without a
    sketch are all lowered. Those whose sketch finds no
    placement that fits local memory come last, and only while no candidate is legal: the sketch
    doubles every buffer of a double-buffered candidate, the pipeline only those it prefetches, but most
    of them overflow. Where fewer than `lowered` are legal within the quota (few tile sizes fit, as at
    large batches), the candidates past their tiles' quota are lowered after the others, cheapest first."""
    with _cycle_collector_paused():
        return _explore_ranked(op, machine, model, lowered, _check_size(op, machine, max_candidates))


def _explore_ranked(op: BoundOperator, machine: LocalMemoryMachine, model: SketchModel, lowered: int,
                    total: int) -> Space:
    sketcher = Sketcher(op, machine, model)
    space = Space(op)
    units = unit_axes(op)
    bufferings = (False, True) if machine.asynchronous_dma else (False,)
    register_tiles = micro_kernels(op, machine)
    lowered_at: list[tuple[tuple[int, ...], list[tuple[Candidate, Stages]]]] = []
    # Entries (seconds, kind, place, candidate, payload), by kind: a group of classes to bound at their
    # least bound (GROUP, payload its classes); a class to open at its bound (OPEN, payload its orders);
    # a candidate to price at its placement's bound (PRICE, payload its signature and placement); a
    # candidate to lower at its price (LOWER, payload its signature). At one figure a group is bounded
    # before a class opens, a class opens before a candidate is priced, and one is priced before one is
    # lowered.
    queue: list[tuple[float, int, tuple[int, ...], Candidate, object]] = []
    least: dict[int, Callable[[int], float]] = {}  # per class: its bound, by the bytes a sketch moves
    rest: dict[int, float] = {}  # per partial class: its other nests' least seconds (`Sketcher.rest_seconds`)
    prices: dict[tuple, float] = {}  # per signature

    def add(place: tuple[int, ...], candidate: Candidate) -> bool:
        entries = _lowered(op, candidate, machine, space, register_tiles)
        if entries:
            lowered_at.append((place, entries))
        return bool(entries)

    def open_class(number: int, orders: Iterable[tuple[str, ...]], first: Candidate) -> None:
        for position, order in enumerate(orders):
            for double_buffer in bufferings:
                candidate = replace(first, order=order, double_buffer=double_buffer)
                place = (number, position, double_buffer)
                try:
                    placement = sketcher.placement(candidate)
                except Rejected as rejection:
                    if rejection.reason == "local memory overflow":
                        heapq.heappush(queue, (math.inf, LOWER, place, candidate, ()))
                    else:
                        space.rejected[rejection.reason] += len(register_tiles)
                    continue
                if placement is None:  # no sketch: priced on its real IR like the lowered few
                    add(place, candidate)
                    continue
                signature = (double_buffer, placement.signature)
                seconds = prices.get(signature)
                if seconds is not None:
                    heapq.heappush(queue, (seconds, LOWER, place, candidate, signature))
                else:
                    bound = least[number](placement.moved) * placement.share + rest.get(number, 0.0)
                    heapq.heappush(queue, (bound, PRICE, place, candidate, (signature, placement)))

    def bound_class(number: int, first: Candidate, orders: list[tuple[str, ...]]) -> None:
        found_nest = _class_nest(sketcher, first, orders)
        if found_nest is None:  # a primitive constraint: the class's every candidate
            space.rejected["primitive constraint"] += len(orders) * len(bufferings) * len(register_tiles)
            return
        nest, bounded = found_nest
        if nest is None:  # no bound for the class: each of its candidates is priced before any is lowered
            bound = -math.inf
            least[number] = lambda _moved: -math.inf
        else:
            least[number] = model.bound(nest.module)
            rest[number] = sketcher.rest_seconds(bounded, model, bound=True)
            bound = least[number](sketcher.least_bytes(bounded)) * nest.share + rest[number]
        heapq.heappush(queue, (bound, OPEN, (number,), first, orders))

    # Tile classes that differ only in their fused consumers form a group, bounded as one until its bound
    # comes up (a first layer's 2/3 of classes leave the bias or the activation apart and are never
    # opened). Only where the model's price ignores the order of loops without transfers: the compute
    # nests of a group's classes are one nest in several orders.
    for group in _fusion_groups(op, units, vectorized(op, machine)):
        plain = next((member for member in group if not member[1].fused), None)  # no fused consumer
        bound = None
        if len(group) > 1 and plain is not None and model.commuting:
            _, plain_first, plain_orders = plain
            bound = _group_bound(sketcher, model, plain_first, plain_orders)
        if bound is None:
            for member in group:
                bound_class(*member)
        else:
            heapq.heappush(queue, (bound, GROUP, (group[0][0],), group[0][1], group))
    found = 0
    programs: set[tuple] = set()  # `_program` of each legal candidate lowered
    # Legal candidates lowered per choice of tile sizes and buffering: as many of each buffering, so at
    # most LOWERED_PER_TILES per choice of tile sizes.
    per_buffering: Counter[tuple] = Counter()
    per_buffering_cap = LOWERED_PER_TILES // len(bufferings)
    seen: set[tuple] = set()
    deferred: list[tuple[tuple[int, ...], Candidate, object]] = []  # past their tiles' quota, cheapest first

    def new_program(candidate: Candidate, signature: object) -> tuple | None:
        """The candidate's `_program`; None where one of its signature is legal or its program lowered."""
        program = _program(candidate, units)
        return None if (signature and signature in seen) or program in programs else program

    def lower_one(place: tuple[int, ...], candidate: Candidate, signature: object, program: tuple) -> None:
        nonlocal found
        if add(place, candidate):
            found += 1
            programs.add(program)
            per_buffering[candidate.splits, candidate.double_buffer] += 1
            seen.add(signature)  # an illegal one does not stand for the others: their peeled tiles may fit

    while queue and found < lowered:
        price, kind, place, candidate, payload = heapq.heappop(queue)
        if price == math.inf and found:
            break  # no placement fits by the sketches of the rest: they are lowered only while none is legal
        if kind == GROUP:
            for member in payload:  # type: ignore[attr-defined]
                bound_class(*member)
        elif kind == OPEN:
            open_class(place[0], payload, candidate)  # type: ignore[arg-type]
        elif kind == PRICE:
            signature, placement = payload  # type: ignore[misc]
            seconds = prices.get(signature)
            if seconds is None:  # a partial placement's maps besides priced at this candidate's order: the
                # others of its signature differ at most in the maps' loop order
                module = sketcher.module(placement)
                seconds = prices[signature] = (model.price(module, candidate.double_buffer, placement.peeled)
                                               * placement.share + sketcher.rest_seconds(candidate, model))
            heapq.heappush(queue, (seconds, LOWER, place, candidate, signature))
        elif (program := new_program(candidate, payload)) is not None:
            if per_buffering[candidate.splits, candidate.double_buffer] < per_buffering_cap:
                lower_one(place, candidate, payload, program)
            else:
                deferred.append((place, candidate, payload))
    # Fewer legal than `lowered` within the quota (few tile sizes fit; a big batch): the deferred ones,
    # before any whose sketch fits no placement (lowering all of those took 9 s on AlexNet conv5 at B = 128).
    for place, candidate, payload in deferred:
        if found >= lowered:
            break
        if (program := new_program(candidate, payload)) is not None:
            lower_one(place, candidate, payload, program)
    # In the space's order (tile classes, then orders): the model tuner breaks ties by it.
    space.legal = [entry for _, entries in sorted(lowered_at, key=lambda pair: pair[0]) for entry in entries]
    # The rest, neither lowered nor rejected, was ranked out: by its sketch's price or bound, one of its
    # signature, its class's bound, or a class of the same memory (`_tile_memory`).
    space.sketched = total - len(space.legal) - sum(space.rejected.values())
    if not space.legal:
        raise ScheduleError(_explain_empty(op, space))
    return space


def _class_nest(sketcher: Sketcher, first: Candidate,
                orders: list[tuple[str, ...]]) -> tuple[Sketch | None, Candidate] | None:
    """The class's compute nest (`Sketcher.compute_nest`) at its first order that schedules (fused
    statements need their reductions inside), with that candidate; None when a primitive constraint
    rejects the class whole. Orders that complete its overwritten sums' tiles come first: their
    sketches move the fewest bytes (at the others the output is filled first and read back), so the
    class's bound holds for all."""
    try:
        complete = sketcher.complete_orders(first, orders)
    except Rejected as rejection:
        if rejection.reason == "primitive constraint":
            return None
        complete = set()
    for order in sorted(orders, key=lambda order: order not in complete):  # stable: the complete first
        candidate = replace(first, order=order)
        try:
            return sketcher.compute_nest(candidate), candidate
        except Rejected as rejection:
            if rejection.reason == "primitive constraint":
                return None
    return None, first  # no order schedules: each candidate says why


def _group_bound(sketcher: Sketcher, model: SketchModel, first: Candidate,
                 orders: list[tuple[str, ...]]) -> float | None:
    """A bound of every class of a group (tile classes that differ only in their fused consumers): the
    bound of its class with none, `first`, its maps aside. The others' compute nests are the same nest
    (an epilogue is no work of a bound) in other orders, and they move as many bytes or more (a fused
    consumer's output tile is not hoisted). Valid where the model's price ignores the order of loops
    without transfers (`SketchModel.commuting`). None: bound each class."""
    found = _class_nest(sketcher, first, orders)
    if found is None or found[0] is None:
        return None
    nest, bounded = found
    return model.bound(nest.module)(sketcher.least_bytes(bounded)) * nest.share


def _fusion_groups(op: BoundOperator, units: dict[str, frozenset[int]], dims: tuple[str, ...] | None = None
                   ) -> list[list[tuple[int, Candidate, list[tuple[str, ...]]]]]:
    """The space's tile classes, numbered in `tile_classes`' order, each with its candidate at its first
    order and its orders (vectorizing `dims`, or every dimension the space offers); one class per memory
    (`_tile_memory`: a class of the same memory as one before holds the same programs), grouped by all
    but their fused consumers (`_group_bound`)."""
    groups: dict[tuple, list[tuple[int, Candidate, list[tuple[str, ...]]]]] = {}
    same_memory: set[tuple] = set()
    for number, (first, orders) in enumerate(tile_classes(op, dims)):
        memory = _tile_memory(first, units)
        if memory in same_memory:
            continue
        same_memory.add(memory)
        splits, vectorize, _, layouts = memory
        groups.setdefault((splits, vectorize, layouts), []).append((number, first, list(orders)))
    return list(groups.values())


def unit_axes(op: BoundOperator) -> dict[str, frozenset[int]]:
    """Per tensor, its declared axes of extent 1 (the batch at B = 1)."""
    return {t.name: frozenset(axis for axis, extent in enumerate(t.shape) if extent == 1) for t in op.seed.tensors}


def _tile_memory(candidate: Candidate, units: dict[str, frozenset[int]]) -> tuple:
    """What makes a candidate's tile class, up to the place of a tensor's axes of extent 1 in its layout:
    at B = 1, [Ri, Ci, Ni, B] and [Ri, Ci, B, Ni] are the same memory, so two such classes hold the same
    programs."""
    layouts = tuple((name, tuple(axis for axis in permutation if axis not in units[name]))
                    for name, permutation in candidate.layouts)
    return candidate.splits, candidate.vectorize, candidate.fused, layouts


def _program(candidate: Candidate, units: dict[str, frozenset[int]]) -> tuple:
    """What makes a candidate's program: its `_tile_memory`, loop order and buffering. The lowering quota
    of a tile class is not spent on one order in each of its same-memory layouts (VGG16 conv1_1 at B = 1
    on the SW26010: the 4 lowerings of the best tiles went to one order in four such layouts, and the
    pick was 1.41x the best)."""
    return _tile_memory(candidate, units), candidate.order, candidate.double_buffer


def _lowered(op: BoundOperator, candidate: Candidate, machine: LocalMemoryMachine, space: Space,
             register_tiles: tuple[tuple[int, int] | None, ...]) -> list[tuple[Candidate, Stages]]:
    """The candidate lowered, once per micro-kernel of `register_tiles` (`micro_kernels`: they share the
    stages, the tiles shape only the backend's code); none, with the rejection counted in `space`, when it
    is illegal."""
    try:
        stages = lower(op, candidate, machine)
    except Rejected as rejection:
        space.rejected[rejection.reason] += len(register_tiles)
        return []
    return [(replace(candidate, micro_kernel=tile), stages) for tile in register_tiles]


def _explain_empty(op: BoundOperator, space: Space) -> str:
    """Why nothing is legal: how many candidates each reason rejected."""
    reasons = "; ".join(f"{reason}: {count}" for reason, count in space.rejected.most_common())
    return f"no legal candidate among {space.total} for operator {op.name} with {op.params} ({reasons})"
