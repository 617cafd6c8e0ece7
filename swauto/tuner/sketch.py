"""Ranking before lowering: a candidate's *sketch*, its loop nest with each operand's transfer where
`infer_dma` and `hoist_dma` place it, built without the pass pipeline, so that a target's model can
price every candidate of a space in the time lowering takes for a few dozen.

Lowering a candidate costs milliseconds (scheduling, peeling, placing and hoisting transfers,
double buffering, planning local memory), and a space holds thousands. Most of that work is shared:
the candidates that differ only in loop order (a *tile class*) have the same tiles, the same
primitive call and the same operand boxes; the order decides only where each transfer sits and how
far it can be hoisted. So each class is scheduled once (`apply`, `pad_primitive`) and each order
then permutes its loops, places each transfer in the innermost loop its box depends on, and hoists
it as `hoist_dma` does (over the dependent loops that move the fewest bytes while the buffers and
the primitive's float64 copies fit local memory), with the boxes of each set of crossed loops
computed once per class. A `Placement` (where each transfer sits, and the sketch's signature) comes
before the module, which a tuner builds only for a signature it has not priced yet.

A sketch is an estimate's input, not a program: every tile is full (no peeled boundary), and it has
no zeroing, waits, double-buffered halves or memory plan. The tuner lowers the candidates whose
sketches its model prices fastest and ranks those on their real IR (`explore_ranked`). Only a
candidate that is one perfect nest once scheduled has a sketch (an operator of one statement, or
one whose consumers are all fused into their producer). A candidate of one nest that is not a map
(its *main* nest; of maps alone, the first) and maps besides (consumers not fused, an output's fill)
has a *partial* placement, of its main nest alone: its price plus that of the maps' own sketches
(`Sketcher.rest_seconds`) ranks the candidate without lowering it, but it is no sketch
(`Sketcher.sketch` gives None). The others are lowered to be priced.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import ceil, prod

from swauto.errors import Rejected
from swauto.frontend.check import BoundOperator
from swauto.ir import expr as ex
from swauto.ir.analysis import trip_count
from swauto.ir.dependence import loop_ranges
from swauto.ir.nests import loop_nest, outermost, rebuild_nest, statements
from swauto.ir.nodes import Access, Call, Compare, Dma, For, LocalBuffer, Module, Seq, Stmt, seq
from swauto.machine import DTYPE_BYTES, LocalMemoryMachine
from swauto.passes.exchange_transfers import exchange_transfers
from swauto.passes.guard_padding import padding_guards
from swauto.passes.hoist_dma import cheapest, placement_cost
from swauto.passes.infer_dma import buffer_names, hoistable, hoisted_extents, transfer_box
from swauto.passes.init_outputs import init_outputs, moving_loops
from swauto.passes.pad_primitive import multiples, pad_primitive
from swauto.passes.plan_local_memory import aligned, per_cpe_bytes
from swauto.schedule.candidate import Candidate
from swauto.schedule.fusion import check_order, indexing_loops
from swauto.schedule.space import apply
from swauto.schedule.transforms import reorder


@dataclass(frozen=True)
class _Operand:
    """One transfer of the class's call: its box at the first iteration, its buffer, whether it is
    read and written (as `place_transfers` decides), its element size, how far it may be hoisted at
    most (None: as far as `hoistable`)."""

    role: str
    access: Access
    buffer: str
    reads: bool
    writes: bool
    element: int
    cap: int | None
    used: frozenset[str]  # the loop variables its box's address depends on
    movable: frozenset[str]  # those its transfer may be hoisted over (`hoistable`, each on its own)


@dataclass
class _TileClass:
    """What the candidates of one tile class share: the scheduled module (for its tensors), its loops
    by name, the padded call, its transfers, the float64 copies' local memory per role, and the boxes
    per set of crossed loops."""

    module: Module
    loops: dict[str, For]
    call: Call
    operands: tuple[_Operand, ...]
    twins: dict[str, int]
    spread: str
    share: float  # `Sketch.share`
    # Per loop whose last iteration `peel_boundaries` peels into a copy of its body: per operand role, its
    # box in that copy over its box in a whole tile.
    peeled: dict[str, dict[str, float]]
    transfers: dict[tuple[str, frozenset[str]], _Transfer]
    # Per operand and order of the loops its box depends on: its transfer hoisted over none, one, ...
    # of them, as far as it may be, each with its home (the loop whose body holds it; None: none).
    ladders: dict[tuple[str, tuple[str, ...]], tuple[tuple[str | None, _Transfer], ...]]
    trips: dict[str, int]  # per loop
    floors: dict[int, int]  # per buffer count (1, 2: double buffered), the least local memory of any placement
    calls: dict[tuple[int, ...], Call]  # the call on its buffers, per choice of transfers (by identity)
    # The classes of the other nests (maps) of a candidate of several, of which this is the main nest
    # (a partial class: the module docstring).
    rest: tuple[_TileClass, ...] = ()
    # As a map of partial classes (`Sketcher.rest_seconds`): its seconds per model, order of its loops
    # and buffering, and its least per model.
    seconds: dict[tuple, float] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        return bool(self.rest)


@dataclass(frozen=True)
class _Scheduled:
    """A choice of tiles scheduled (`apply` at some loop order, before `init_outputs`). A candidate's
    order decides its tile class by, per nest whose call overwrites a sum, its loops and its
    `moving_loops` (None where no order completes its tiles: `completes`); and whether it is legal by,
    per nest with fused consumers, its loops and its `indexing_loops`."""

    module: Module
    sums: tuple[tuple[frozenset[str], frozenset[str] | None], ...]
    fused: tuple[tuple[frozenset[str], frozenset[str]], ...]

    def completes(self, order: tuple[str, ...]) -> tuple[bool, ...]:
        """Per overwritten sum, whether `order` completes its tiles (`init_outputs` zeroes them in local
        memory rather than filling the output first)."""
        return tuple(moving is not None and outermost((var for var in order if var in loops), moving)
                     for loops, moving in self.sums)

    @staticmethod
    def of(module: Module) -> _Scheduled:
        try:
            nests = [loop_nest(nest) for nest in statements(module)]
        except ValueError:  # a nest that is not perfect: no sketch (`_tile_class`)
            nests = []
        sums, fused = [], []
        for loops, call in nests:
            names = frozenset(loop.var for loop in loops)
            if call.overwrite and call.signature.combine == "+":
                sums.append((names, moving_loops(loops, call)))
            if call.epilogue:
                fused.append((names, indexing_loops(loops, call)))
        return _Scheduled(module, tuple(sums), tuple(fused))


@dataclass(eq=False)
class _Transfer:
    """An operand's transfer hoisted over a set of loops (`crossed`): the bytes one execution moves (get
    and put) and its buffer's local bytes per CPE, which is all a placement needs; its IR (`_TransferIR`)
    is built when a sketch's module is (`Sketcher.module`). Compared by identity: one per operand and
    set of crossed loops in a tile class."""

    operand: _Operand
    loops: tuple[For, ...]  # an order of the class's loops it was asked for in (any: the box depends on the set)
    crossed: frozenset[str]
    moved: int
    local: int
    ir: _TransferIR | None = None


@dataclass(frozen=True)
class _TransferIR:
    """A transfer's buffer, its get and its put (at the start and at the end of its loop's body; none
    where the operand is not read or not written), and the primitive's view of the buffer."""

    buffer: LocalBuffer
    before: tuple[Stmt, ...]
    after: tuple[Stmt, ...]
    operand: Access


@dataclass(frozen=True)
class Sketch:
    """A candidate's sketch: its loop nest with every transfer placed (`module`), and the share of the
    work of its whole tiles the candidate really does (`share`: 13 columns in tiles of 4 run 3 whole
    tiles and one of a column, 13/16 of the sketch's 4 whole tiles). A price of the module times the
    share estimates the candidate's.

    `signature` is equal for two sketches of one tile class whose nests differ only by the order of
    loops within a *run* (consecutive loops with no transfer between them): the same transfers, each
    crossing the same loops and running as often, the same trips (and a run's transfers in the same
    loop where that loop runs one whole tile and a shorter one: `Sketcher._signature`). A price that
    depends on the loops' order only through where transfers sit (`commuting` in `Sketcher`) is the
    same for both."""

    module: Module
    share: float
    signature: tuple
    peeled: Mapping[str, float] = field(default_factory=dict)  # `Placement.peeled`


@dataclass(frozen=True)
class SketchModel:
    """A target's model as ranking before lowering uses it, for one tuning (its machine's constants
    read once): `price`, a sketch's seconds (sketch, double buffered, the loops whose last tile is
    shorter with that tile's share of a whole one's work: the real IR runs that tile in a copy of the
    loop's body after the loop, where the host's threads do not share it); `bound`, given a tile class's
    nest with no transfer (`Sketcher.compute_nest`), the seconds no sketch of the class that moves a
    number of bytes is priced under (with `Sketcher.least_bytes`, no sketch of the class at all);
    `call_seconds`, one primitive call's time on tiles in local memory, by which a class's shorter
    last tiles are weighed (None: by their volume); `commuting`, whether `price` is unchanged by
    swapping two loops with no transfer between them; `innermost`, whether it depends on which loop
    (of more than one trip) runs innermost, in the nest and around each run of loops' transfers, all
    the same (`bound` then holds for every order)."""

    price: Callable[[Module, bool, Mapping[str, float]], float]
    bound: Callable[[Module], Callable[[int], float]]
    call_seconds: Callable[[Call], float] | None = None
    commuting: bool = True
    innermost: bool = False


@dataclass(frozen=True)
class Placement:
    """Where a candidate's transfers sit, its sketch without the module: per operand, the loop whose
    body holds its transfer (None: outside every loop) and the transfer; `signature` and `share` as
    the sketch's; `moved`, the bytes its transfers move in all. A tuner compares signatures, and
    bounds its price by `moved` (`SketchModel.bound`), before it builds a module (`Sketcher.module`)."""

    tiles: _TileClass
    loops: tuple[For, ...]
    placed: tuple[tuple[str | None, _Transfer], ...]
    signature: tuple
    share: float
    moved: int

    @property
    def peeled(self) -> dict[str, float]:
        """The loops whose last tile is shorter, each with that tile's work over a whole one's (`SketchModel.price`):
        the least of its operands' boxes' ratios (a GEMM's work scales with each dimension, which one
        of its operands does not carry)."""
        return {var: min(ratios.values()) for var, ratios in self.tiles.peeled.items()}


class Sketcher:
    """Sketches of the candidates of one operator on one machine (see the module docstring), for the
    `model` that prices them (None: one that commutes, with no `call_seconds`). Where its price is not
    `commuting` (unchanged by swapping two loops with no transfer between them: the models multiply
    such loops' trips), the outermost run of loops keeps its order in the signature (the host's threads
    share its outermost loops), and so does a run holding a loop whose last tile is shorter
    (`_signature`); where it depends on the `innermost` loop, the signature names it. Its
    `call_seconds` (one primitive call on tiles in local memory) weighs a class's shorter last tiles in
    its share of work; without, their padded volume does."""

    def __init__(self, op: BoundOperator, machine: LocalMemoryMachine, model: SketchModel | None = None) -> None:
        self.op = op
        self.machine = machine
        self.commuting, self.innermost, self.call_seconds = (
            (model.commuting, model.innermost, model.call_seconds) if model else (True, False, None))
        # Per choice of tiles (the candidate's choices but its order, buffering and micro-kernel): its
        # scheduled module, or why it has none whatever the order.
        self.scheduled: dict[tuple, _Scheduled | Rejected] = {}
        # Per tile class: a choice of tiles and whether its order completes each overwritten sum's tiles.
        self.classes: dict[tuple, _TileClass | None] = {}
        self.maps: dict[Module, _TileClass | None] = {}  # the partial classes' maps, by their module

    def sketch(self, candidate: Candidate) -> Sketch | None:
        """The sketch of `candidate`, or None when it is not one perfect loop nest once scheduled
        (several statements, unless fused into one; an output filled by a statement of its own): such
        a candidate must be lowered to be priced. Raises `Rejected` when its class cannot be scheduled
        (the reason `apply` gives) or when no placement of its transfers fits local memory."""
        placement = self.placement(candidate)
        if placement is None or placement.tiles.partial:
            return None
        return Sketch(self.module(placement), placement.share, placement.signature, placement.peeled)

    def placement(self, candidate: Candidate) -> Placement | None:
        """The placement of `candidate`'s transfers (its sketch without the module), or of its main
        nest's (`Placement.tiles.partial`: the module docstring); None and `Rejected` as `sketch`."""
        found = self._class_of(candidate)
        return None if found is None else self._place(found, candidate)

    def compute_nest(self, candidate: Candidate) -> Sketch | None:
        """The nest of `candidate`'s tile class with no transfer at all, its call on whole tiles in
        local memory: what every sketch of the class computes, with nothing moved. A model that
        prices a sketch at least as this nest single buffered (both of swauto's do: the transfers
        add their time, or overlap the compute) bounds every sketch of the class from below. None
        and `Rejected` as `sketch`."""
        found = self._class_of(candidate)
        return None if found is None else self._compute_nest(found)

    def _compute_nest(self, found: _TileClass) -> Sketch:
        loops = tuple(found.loops.values())
        local = {operand.role: self._ir(found, self._transfer(found, operand, loops, frozenset())).operand
                 for operand in found.operands}
        # The class's sketches at orders that add into a filled output skip the taps of padding that an
        # overwriting call runs (`guard_padding`): counted skipped here, what no order's sketch beats. (A
        # stride-2 first layer's class at an overwriting order was bounded 3% above its sketch at another.)
        skipped = self._guards(replace(found.call, overwrite=False, epilogue=()), found.module, loops, found.peeled)
        call = replace(found.call.with_operands(lambda role, _: local[role]), epilogue=(), runs_if=skipped)
        return Sketch(replace(found.module, buffers=(), body=rebuild_nest(list(loops), call)), found.share, ())

    def least_bytes(self, candidate: Candidate) -> int:
        """The fewest bytes any sketch of `candidate`'s tile class moves, whatever its order or
        buffering: per operand, the least over the sets S of loops its transfer may cross (loops its box
        depends on, each of them hoistable, as many as it may be hoisted over) whose buffer alone fits
        local memory, of its transfer hoisted over S times the trips of the other loops its box depends
        on (it runs at least once per trip of those). With `compute_nest`, what a model's bound on the
        class needs. The class must have a sketch (`compute_nest` is not None)."""
        tiles = self._class_of(candidate)
        assert tiles is not None
        return self._least_bytes(tiles)

    def rest_seconds(self, candidate: Candidate, model: SketchModel, bound: bool = False) -> float:
        """The seconds of the maps besides the main nest of `candidate`'s partial class (0 for a class of
        one nest): each priced by `model` on its sketch at the candidate's order, or, with `bound`, its
        least (`SketchModel.bound` on its nest moving the fewest bytes it may: what no order beats).
        The class must have a placement (`compute_nest` is not None)."""
        tiles = self._class_of(candidate)
        assert tiles is not None
        seconds = 0.0
        for rest in tiles.rest:
            key = (model,) if bound else (model, tuple(var for var in candidate.order if var in rest.loops),
                                          candidate.double_buffer)
            priced = rest.seconds.get(key)
            if priced is None and not bound:
                try:
                    placement = self._place(rest, candidate)
                    priced = model.price(self.module(placement), candidate.double_buffer, placement.peeled)
                except Rejected:  # no placement of its own fits (it is lowered to be priced): its least
                    pass
            if priced is None:
                priced = model.bound(self._compute_nest(rest).module)(self._least_bytes(rest))
            rest.seconds[key] = priced
            seconds += priced * rest.share
        return seconds

    def _least_bytes(self, tiles: _TileClass) -> int:
        room = self.machine.ldm_usable_bytes
        total = 0
        for operand in tiles.operands:
            deps = [var for var in tiles.loops if var in operand.used]
            movable = [var for var in deps if var in operand.movable]
            most = len(movable) if operand.cap is None else min(operand.cap, len(movable))
            twin = tiles.twins.get(operand.role, 0)
            least = []
            for size in range(most + 1):
                for crossed in itertools.combinations(movable, size):
                    moved, local = self._hoisted(tiles, operand, crossed)
                    # Not hoisted, it counts even where it does not fit: then no sketch of the class fits.
                    if not size or local + twin <= room:
                        least.append(moved * prod(tiles.trips[var] for var in deps if var not in crossed))
            total += min(least)
        return total

    def complete_orders(self, candidate: Candidate, orders: Iterable[tuple[str, ...]]) -> set[tuple[str, ...]]:
        """Those of `orders` at which `init_outputs` zeroes every overwritten sum's tiles in local memory for
        `candidate`'s tile class (at the others it fills the output by a nest of its own, which the sum
        then reads). `Rejected` as `sketch`."""
        scheduled = self._scheduled(candidate)
        return {order for order in orders if all(scheduled.completes(order))}

    def _scheduled(self, candidate: Candidate) -> _Scheduled:
        # A tuple, not `replace(candidate, ...)`: this runs for every candidate of the space.
        key = (candidate.splits, candidate.layouts, candidate.vectorize, candidate.fused)
        scheduled = self.scheduled.get(key)
        if scheduled is None:
            try:
                scheduled = _Scheduled.of(apply(self.op, candidate, self.machine))
            except Rejected as rejection:
                if rejection.reason != "primitive constraint":  # the others may depend on the loop order
                    raise
                scheduled = rejection
            self.scheduled[key] = scheduled
        if isinstance(scheduled, Rejected):
            raise scheduled
        return scheduled

    def _class_of(self, candidate: Candidate) -> _TileClass | None:
        scheduled = self._scheduled(candidate)
        for loops, indexing in scheduled.fused:  # as `fuse_consumers` checks at the candidate's order
            check_order((var for var in candidate.order if var in loops), indexing)
        # The loop order decides whether an overwritten sum's output is filled first (`init_outputs`: a
        # fill nest and a call that reads its output) or zeroed in local memory: two tile classes.
        key = (candidate.splits, candidate.layouts, candidate.vectorize, candidate.fused,
               scheduled.completes(candidate.order))
        if key not in self.classes:
            module = reorder(scheduled.module, candidate.order) if scheduled.sums else scheduled.module
            self.classes[key] = self._tile_class(init_outputs(module))
        return self.classes[key]

    def _tile_class(self, module: Module) -> _TileClass | None:
        nests = statements(module)
        if len(nests) == 1:
            return self._nest_class(module)
        top = {id(stmt) for stmt in (module.body.stmts if isinstance(module.body, Seq) else (module.body,))}
        if module.context or any(id(nest) not in top for nest in nests):  # nests inside sequence loops
            return None
        try:  # the one nest that is not a map; of maps alone, the first
            main = [nest for nest in nests if loop_nest(nest)[1].signature.kind != "map"] or nests[:1]
        except ValueError:  # a nest that is not perfect
            return None
        if len(main) != 1:
            return None
        classes = [self._nest_class(replace(module, body=main[0])),
                   *(self._map_class(replace(module, body=nest)) for nest in nests if nest is not main[0])]
        if None in classes:
            return None
        return replace(classes[0], rest=tuple(classes[1:]))  # type: ignore[arg-type]

    def _map_class(self, module: Module) -> _TileClass | None:
        """`_nest_class` of a partial class's map, remembered: the maps beside a main nest are mostly the
        same in every tile class (their own splits, not the main nest's), so their placements and prices
        are too (`rest_seconds`)."""
        if module not in self.maps:
            self.maps[module] = self._nest_class(module)
        return self.maps[module]

    def _nest_class(self, module: Module) -> _TileClass | None:
        """The tile class of `module`'s one nest; None where it is not one perfect nest."""
        if not isinstance(module.body, For | Call) or module.context:
            return None
        loops, call = loop_nest(module.body)
        first: dict[str, int] = {}
        for loop in loops:  # the first iteration of every loop (a split's inner bounds depend on its outer loop)
            first[loop.var] = ex.evaluate(loop.start, first)
        share = _share_of_work(loops, call, first, self.machine, self.call_seconds)
        # A loop runs as often as at the first iteration of the loops around it (full tiles): constant bounds.
        loops = [replace(loop, start=ex.Const(first[loop.var]), stop=ex.Const(ex.evaluate(loop.stop, first)))
                 for loop in loops]

        def full(access: Access) -> Access:  # a last tile's min(...) extent at the first iteration: a full tile
            return replace(access, extents=tuple(e if isinstance(e, int) else ex.evaluate(e, first)
                                                 for e in access.extents))

        def settled(call: Call) -> Call:  # its boxes and sizes at the first iteration: numbers
            return replace(call.with_operands(lambda _, access: full(access)),
                           sizes=tuple((d, s if isinstance(s, int) else ex.evaluate(s, first)) for d, s in call.sizes))

        peeled = _peeled_copies(loops, call, first)
        call = replace(settled(call), epilogue=tuple(settled(fused) for fused in call.epilogue))
        module = pad_primitive(replace(module, body=rebuild_nest(loops, call)), self.machine)
        loops, call = loop_nest(module.body)
        call = replace(call, runs_if=self._guards(call, module, loops, peeled))
        names = buffer_names(call)
        out = call.output_role
        operands = []
        for role, access in call.transfers:
            writes = role == out
            zeroed = writes and call.overwrite
            tensor = module.tensor(access.name)
            operands.append(_Operand(
                role, access, names[role],
                reads=not writes or call.signature.reads_output() and not zeroed,
                writes=writes, element=DTYPE_BYTES[tensor.dtype],
                cap=0 if writes and call.epilogue else None,  # fused consumers run on one call's box
                used=(used := frozenset().union(*(ex.free_vars(start) for start in access.starts))),
                movable=frozenset(loop.var for loop in loops if loop.var in used and hoistable(access, (loop,)))))
        twins = {}  # per role, the primitive's float64 copy of its operand tile (`plan_local_memory`)
        if call.signature.kind == "gemm" and self.machine.gemm_compute_dtype != "float32":
            twins = {role: aligned(per_cpe_bytes(LocalBuffer(f"{names[role]}_double", access.padded_extents(),
                                                             self.machine.gemm_compute_dtype), self.machine))
                     for role, access in call.operands}
        spread = "mesh" if call.signature.kind == "gemm" else "flat"
        return _TileClass(module, {loop.var: loop for loop in loops}, call, tuple(operands), twins, spread, share,
                          peeled, {}, {}, {loop.var: trip_count(loop) for loop in loops}, {}, {})

    def _guards(self, call: Call, module: Module, loops: Sequence[For], peeled: Mapping[str, object]
                ) -> tuple[Compare, ...]:
        """`call`'s conditions to run, as `guard_padding` gives them where the machine skips tiles of
        padding; not along a loop with a shorter last tile (`peeled`): the sketch's last tile is whole, so
        a skip there would count a whole tile's work where the real IR skips a short one's (the share of
        work then scales it again; AlexNet conv4 at B = 32 on the host, 4 columns per GEMM on 13: priced
        6% below its real IR, ahead of the best candidate, 1 column)."""
        if not self.machine.skips_zero_tiles:
            return ()
        guards = padding_guards(call, loop_ranges(loops), {t.name: t.shape for t in module.tensors})
        return tuple(guard for guard in guards if not ex.free_vars(guard.left) & peeled.keys())

    def _place(self, tiles: _TileClass, candidate: Candidate) -> Placement:
        # A fused consumer's loops are gone: the order's other loops are the nest's.
        loops = tuple(tiles.loops[var] for var in candidate.order if var in tiles.loops)
        if len(loops) != len(tiles.loops):
            raise Rejected("not in this space", "the loop order names other loops")
        doubled = 2 if candidate.double_buffer else 1
        floor = tiles.floors.get(doubled)
        if floor is None:  # every transfer in the innermost loop its box depends on: the least room any order takes
            floor = tiles.floors[doubled] = sum(
                doubled * self._transfer(tiles, operand, loops, frozenset()).local + tiles.twins.get(operand.role, 0)
                for operand in tiles.operands)
        if floor > self.machine.ldm_usable_bytes:
            raise Rejected("local memory overflow", "no placement of the transfers fits local memory")
        order = tuple(loop.var for loop in loops)
        outside = list(itertools.accumulate((tiles.trips[var] for var in order), operator.mul, initial=1))
        position = {var: index for index, var in enumerate(order)}
        # The loops inside another that runs more than once (a loop of one trip is no loop once lowered).
        enclosed = {var for index, var in enumerate(order) if outside[index] > 1} if tiles.peeled else set()
        options: list[list[tuple[int, int, str | None, _Transfer, int]]] = []  # cost, local, home, transfer, moved
        for operand in tiles.operands:
            deps = tuple(var for var in order if var in operand.used)
            ladder = tiles.ladders.get((operand.role, deps))
            if ladder is None:
                ladder = tiles.ladders[operand.role, deps] = self._ladder(tiles, operand, loops, deps)
            twin = tiles.twins.get(operand.role, 0)
            per_level: list[tuple[int, int, str | None, _Transfer, int]] = []
            for home, transfer in ladder:
                moved = transfer.moved * outside[0 if home is None else position[home] + 1]
                cost = placement_cost(moved, transfer.local, tiles.call, self.machine)  # as `hoist_dma` weighs it
                # The buffer (both halves, double buffered) and the primitive's float64 copy of its tile.
                local = doubled * transfer.local
                if enclosed:
                    local = ceil(local * _copies(tiles, operand, position, enclosed, home, candidate.double_buffer))
                local += twin  # a whole tile's: the copies of the peeled tiles' are never live beside it
                # An option costing no less in no less room than a lower level's is never chosen.
                if not any(c <= cost and room <= local for c, room, _, _, _ in per_level):
                    per_level.append((cost, local, home, transfer, moved))
            options.append(per_level)
        picks = cheapest([[option[:2] for option in per_level] for per_level in options],
                         self.machine.ldm_usable_bytes, 1)
        if picks is None:
            raise Rejected("local memory overflow", "no placement of the transfers fits local memory")
        placed = tuple(per_level[pick][2:4] for per_level, pick in zip(options, picks, strict=True))
        moved = sum(per_level[pick][4] for per_level, pick in zip(options, picks, strict=True))
        return Placement(tiles, loops, placed, self._signature(tiles, loops, placed), tiles.share, moved)

    def _ladder(self, tiles: _TileClass, operand: _Operand, loops: tuple[For, ...],
                deps: tuple[str, ...]) -> tuple[tuple[str | None, _Transfer], ...]:
        """`_TileClass.ladders` for the operand's dependent loops `deps` (outermost first) in `loops`."""
        # As `hoistable`: the innermost dependent loops, up to the first that may not be crossed.
        cap = next((n for n, var in enumerate(reversed(deps)) if var not in operand.movable), len(deps))
        cap = cap if operand.cap is None else min(cap, operand.cap)
        return tuple((deps[len(deps) - level - 1] if len(deps) > level else None,
                      self._transfer(tiles, operand, loops, frozenset(deps[len(deps) - level:] if level else ())))
                     for level in range(cap + 1))

    def _transfer(self, tiles: _TileClass, operand: _Operand, loops: tuple[For, ...],
                  crossed: frozenset[str]) -> _Transfer:
        """The operand's transfer hoisted over the loops `crossed`, remembered (it depends on nothing else;
        where it sits is the caller's)."""
        key = (operand.role, crossed)
        found = tiles.transfers.get(key)
        if found is not None:
            return found
        moved, local = self._hoisted(tiles, operand, crossed)
        found = tiles.transfers[key] = _Transfer(operand, loops, crossed, moved, local)
        return found

    def _hoisted(self, tiles: _TileClass, operand: _Operand, crossed: Iterable[str]) -> tuple[int, int]:
        """(bytes one execution moves, its buffer's local bytes per CPE) of the operand's transfer
        hoisted over the loops `crossed`."""
        extents = hoisted_extents(operand.access, (tiles.loops[var] for var in crossed))
        shape = tuple(e + p for e, p in zip(extents, operand.access.pad or (0,) * len(extents), strict=True))
        return (prod(extents) * operand.element * (operand.reads + operand.writes),
                aligned(per_cpe_bytes(LocalBuffer(operand.buffer, shape, spread=tiles.spread), self.machine)))

    def _ir(self, tiles: _TileClass, transfer: _Transfer) -> _TransferIR:
        """The transfer's IR: the boxes `infer_dma.place` makes, without its zeroing and waits (the models
        read neither)."""
        if transfer.ir is not None:
            return transfer.ir
        operand, access = transfer.operand, transfer.operand.access
        box = transfer_box(access, transfer.loops, len(transfer.crossed))
        shape = tuple(e + p for e, p in zip(box.extents, access.pad or (0,) * len(box.extents), strict=True))
        tensor_box = Access(access.name, box.starts, box.extents, access.dims, steps=access.steps,
                            walks=access.walks)
        buffer_box = Access(operand.buffer, tuple(ex.Const(0) for _ in shape), box.extents, access.dims)
        transfer.ir = _TransferIR(
            buffer=LocalBuffer(operand.buffer, shape, spread=tiles.spread),
            before=(Dma("get", tensor_box, buffer_box, f"{operand.buffer}_ready"),) if operand.reads else (),
            after=(Dma("put", tensor_box, buffer_box, f"{operand.buffer}_written"),) if operand.writes else (),
            operand=Access(operand.buffer, tuple(s - n for s, n in zip(access.starts, box.starts, strict=True)),
                           access.extents, access.dims, access.pad))
        return transfer.ir

    def module(self, placement: Placement) -> Module:
        """The sketch's module: the class's nest in the placement's loop order, each transfer in its
        home's body (gets first, write-backs last), the call on the transfers' buffers."""
        tiles, placed = placement.tiles, placement.placed
        before: dict[str | None, list[Stmt]] = {}
        after: dict[str | None, list[Stmt]] = {}
        local: dict[str, Access] = {}
        call = tiles.call
        irs = [self._ir(tiles, transfer) for _, transfer in placed]
        for operand, ir in zip(tiles.operands, irs, strict=True):
            local[operand.role] = ir.operand
        for (home, _), ir, operand in zip(placed, irs, tiles.operands, strict=True):
            before.setdefault(home, []).extend(ir.before)
            if operand.writes and call.epilogue:
                # Fused consumers run on the output tile before its write-back, as `infer_dma` places them.
                after.setdefault(home, []).extend(self._epilogue(call, ir.operand, local))
            after.setdefault(home, []).extend(ir.after)
        key = tuple(id(transfer) for _, transfer in placed)
        on_buffers = tiles.calls.get(key)
        if on_buffers is None:
            on_buffers = tiles.calls[key] = replace(call.with_operands(lambda role, _: local[role]), epilogue=())
        body: Stmt = on_buffers
        for loop in reversed(placement.loops):
            body = For(loop.var, loop.start, loop.stop, loop.stride,
                       seq(*before.get(loop.var, ()), body, *after.get(loop.var, ())))
        body = seq(*before.get(None, ()), body, *after.get(None, ()))
        return exchange_transfers(replace(tiles.module, buffers=tuple(ir.buffer for ir in irs), body=body),
                                  self.machine)

    def _signature(self, tiles: _TileClass, loops: tuple[For, ...],
                   placed: tuple[tuple[str | None, _Transfer], ...]) -> tuple:
        """`Sketch.signature`: the class, the transfers outside every loop, then each run of loops (a set;
        where the loops do not commute, the outermost in order, and one holding loops whose last tile is
        shorter as those in order with the sets between them: where they sit decides which loops the
        threads share) with the transfers at its end, and whether the loop that holds them runs one whole
        tile and a shorter one (`double_buffer` prefetches no output tile there: the real IR runs the
        whole tile in a loop of one trip); with `innermost`, the innermost loop of more than one trip, and
        for each run's transfers the innermost such loop around them."""
        homed: dict[str | None, list[int]] = {}
        for home, transfer in placed:
            homed.setdefault(home, []).append(id(transfer))  # transfers live as long as their class
        runs: list[object] = [id(tiles), tuple(homed.get(None, ()))]
        run: list[str] = []
        around = None  # the innermost loop of more than one trip around the loop body reached
        for loop in loops:
            run.append(loop.var)
            around = loop.var if tiles.trips[loop.var] > 1 else around
            if loop.var in homed:
                once = loop.var in tiles.peeled and tiles.trips[loop.var] == 2
                runs.append((self._run(run, len(runs) == 2, tiles), tuple(homed[loop.var]), once,
                             around if self.innermost else None))
                run = []
        runs.append(self._run(run, len(runs) == 2, tiles))
        if self.innermost:
            runs.append(next((loop.var for loop in reversed(loops) if tiles.trips[loop.var] > 1), None))
        return tuple(runs)

    def _run(self, loops: list[str], first: bool, tiles: _TileClass) -> tuple | frozenset[str]:
        if not self.commuting and first:
            return tuple(loops)
        if self.commuting or tiles.peeled.keys().isdisjoint(loops):
            return frozenset(loops)
        # Where the threads' group stops depends on where each loop with a shorter last tile sits among
        # the others: those in order, the sets of loops between them.
        between: list[str] = []
        segments: list[object] = []
        for var in loops:
            if var in tiles.peeled:
                segments += [frozenset(between), var]
                between = []
            else:
                between.append(var)
        return (*segments, frozenset(between))

    @staticmethod
    def _epilogue(call: Call, tile: Access, local: dict[str, Access]) -> list[Call]:
        """The fused consumers on the output tile `tile`, their other inputs' boxes in `local`."""
        tile = replace(tile, pad=())
        return [consumer.with_operands(lambda role, access, i=index, c=consumer: tile if access.name ==
                                       call.output.name else local[f"{c.primitive}{i}_{role}"])
                for index, consumer in enumerate(call.epilogue)]


def _copies(tiles: _TileClass, operand: _Operand, position: dict[str, int], enclosed: set[str],
            home: str | None, doubled: bool) -> float:
    """How many tiles' worth of local memory an operand's buffer takes with those of the peeled copies
    live beside it. A loop's peeled copy inside another loop (`enclosed`) has its own buffer for the
    operand, live beside the whole tiles' when the transfer sits in that loop's body (in the copy,
    which has no such loop, it moves out to the enclosing loop's body) or, double buffered, anywhere
    inside the loop (both copies issue their first transfers before the outermost loop). A transfer
    hoisted over the loop keeps one buffer when its box does not move with the loop; otherwise the
    copy's transfer is another, beside it, but the sketch's box already spans the loop's every trip.
    (The primitive's float64 copies of the tiles live only during a call: one call's at a time.)"""
    buffers = 1.0
    for var, share in tiles.peeled.items():
        if var not in enclosed:
            continue
        inside = -1 if home is None else position[home]  # where the transfer sits against the loop
        if inside == position[var] or doubled and inside > position[var]:
            buffers *= 1 + share[operand.role]
    return buffers


def _peeled_copies(loops: list[For], call: Call, first: dict[str, int]) -> dict[str, dict[str, float]]:
    """`_TileClass.peeled`: the loops whose variable some extent of the call's boxes depends on (a split
    with a shorter last tile), each with, per operand role, the box's volume at the loop's last
    iteration over its volume at the first (`first`: every loop's first iteration)."""
    extents = {role: access.extents for role, access in call.transfers}
    names = set().union(*(ex.free_vars(e) for shape in extents.values() for e in shape if not isinstance(e, int)))

    def volume(shape: tuple, env: dict[str, int]) -> int:
        return prod(e if isinstance(e, int) else ex.evaluate(e, env) for e in shape)

    peeled = {}
    for loop in loops:
        trips = trip_count(loop, first)
        if loop.var in names and trips > 1:
            last = {**first, loop.var: first[loop.var] + (trips - 1) * loop.stride}
            peeled[loop.var] = {role: volume(shape, last) / volume(shape, first) for role, shape in extents.items()}
    return peeled


def _share_of_work(loops: list[For], call: Call, first: dict[str, int], machine: LocalMemoryMachine,
                   call_seconds: Callable[[Call], float] | None = None) -> float:
    """The work the nest does over the work of whole tiles at every iteration: the mean, over the
    iterations of the loops its last tiles depend on, of the call's work times the trips of the loops
    whose bounds vary (a split loop's last part), over its value at the first iteration `first`. A
    call's work is `call_seconds` of it at its padded sizes (a short tile is not cheaper in proportion:
    the primitive's fixed costs, the host's leftover vector lanes), or its padded volume.
    1 when nothing varies, or when those loops are too many to count (a sketch only ranks)."""
    sizes = dict(call.sizes)
    varying = [loop for loop in loops if ex.constant_value(loop.start) is None or ex.constant_value(loop.stop) is None]
    names = set().union(*(ex.free_vars(size) for size in sizes.values() if not isinstance(size, int)),
                        *(ex.free_vars(loop.start) | ex.free_vars(loop.stop) for loop in varying))
    if not names:
        return 1.0
    outer = [loop for loop in loops if loop.var in names]
    if any(loop in varying for loop in outer) or prod(trip_count(loop) for loop in outer) > 4096:
        return 1.0
    rounding = multiples(machine, call.vectorize) if call.signature.kind == "gemm" and call.vectorize else {}

    costs: dict[tuple, float] = {}  # per padded sizes
    # Compiled once: a nest of many tiles evaluates them many times.
    evaluated = [(dim, ex.compiled(ex.as_expr(size)), rounding.get(dim, 1)) for dim, size in sizes.items()]
    varying_bounds = [(ex.compiled(loop.start), ex.compiled(loop.stop), loop.stride) for loop in varying]

    def volume(env: dict[str, int]) -> float:
        key = tuple((dim, -(-size(env) // step) * step) for dim, size, step in evaluated)
        total = costs.get(key)
        if total is None:  # the iterations of a split loop have two sizes: a whole tile's and the last one's
            def settle(_: str, access: Access) -> Access:  # the tile's boxes at this iteration
                return replace(access, extents=tuple(e if isinstance(e, int) else ex.evaluate(e, env)
                                                     for e in access.extents))

            total = costs[key] = (prod(padded for _, padded in key) if call_seconds is None else
                                  call_seconds(replace(call.with_operands(settle), sizes=key, epilogue=())))
        for start, stop, stride in varying_bounds:
            total *= max(0, (stop(env) - start(env) + stride - 1) // stride)
        return total

    # Per loop, its iterations grouped by the values they give every part of a size, extent or bound
    # that depends on it alone (`_parts`: a split loop's whole tiles, its last one), one value standing
    # for each group: the same mean from a few iterations instead of up to 4096.
    outer_names = {loop.var for loop in outer}
    parts = [part for expr in (*(size for size in sizes.values() if not isinstance(size, int)),
                               *(e for _, access in call.operands for e in access.extents if not isinstance(e, int)),
                               *(bound for loop in varying for bound in (loop.start, loop.stop)))
             for part in _parts(expr, outer_names)]
    choices = []  # per loop of `outer`: [a value, how many iterations it stands for]
    for loop in outer:
        mine = [ex.compiled(part) for part in parts if loop.var in ex.free_vars(part)]
        groups: dict[tuple, list[int]] = {}
        for value in range(ex.evaluate(loop.start, {}), ex.evaluate(loop.stop, {}), loop.stride):
            env = {**first, loop.var: value}
            groups.setdefault(tuple(f(env) for f in mine), [value, 0])[1] += 1
        choices.append(list(groups.values()))
    total = count = 0.0
    for combination in itertools.product(*choices):
        weight = prod(times for _, times in combination)
        values = {loop.var: value for loop, (value, _) in zip(outer, combination, strict=True)}
        total += weight * volume({**first, **values})
        count += weight
    return total / (count * volume(first)) if count else 1.0


def _parts(expr: ex.Expr, names: set[str]) -> list[ex.Expr]:
    """The largest parts of `expr` that each depend on one of `names` (its value is a function of
    theirs and of the other variables)."""
    used = ex.free_vars(expr) & names
    if len(used) <= 1:
        return [expr] if used else []
    assert isinstance(expr, ex.BinOp)  # two variables: an operation on parts
    return _parts(expr.left, names) + _parts(expr.right, names)
