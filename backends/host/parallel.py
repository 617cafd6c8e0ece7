"""Which loops of a kernel may run across threads.

The body splits at its top level into statements before a loop nest, the nest, and statements after
it. Inside the nest, a *parallel group* of perfectly nested loops with constant bounds is chosen whose
iterations provably touch disjoint parts of every tensor the kernel writes. Every thread runs the
loops around the group in full (they may only fill the thread's own local buffers: DMA gets, no
writes to memory) and a contiguous range of the group's flattened iterations. Each thread has its
own local buffers. A buffer the nest only reads, filled before it (a transfer hoisted to the root),
is filled by the *prologue*, which every thread runs into its own buffer before its iterations; no
other statement before the nest may use a buffer the nest uses. The statements after the nest run on
the calling thread, whose buffers hold what its prologue filled but, of what the nest defines, only its
own iterations' values: they may read the prologue's buffers (a peeled last tile reading a weight
hoisted to the root), and define the nest's other buffers before they read them. Where they touch no
part of a tensor the nest writes and write no part it reads (`Phases.alongside`), they run on the
calling thread right after its own share, while the others run theirs, and that share is shorter by
the iterations their flops are worth (`Phases.head`): a 7 x 7 image's 1 x 1 layer of 960 channels in
tiles of 256, its last tile of 192 peeled, ran 1.28x faster on two threads. A split is kept only
where the IR verifier shows every generated function reads only what it, or an earlier one on its
workspace, defined, and the statements after the nest only what they or those before it (prologue
included) defined; otherwise the kernel runs on one thread.

An operator of several statements has a nest per statement: `segments` splits the statements after
a nest again, so each nest with a parallel group is a segment of its own, whose threads finish before
the next segment starts (Winograd's transforms and GEMMs, an LSTM step's GEMMs and gate maps).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from math import prod

from swauto.ir.analysis import executions
from swauto.ir.expr import Const, bounds, linear_form
from swauto.ir.nodes import Access, Call, Dma, For, Let, Module, Seq, Stmt, Zero
from swauto.ir.verify import VerificationError, verify_functions
from swauto.ir.visitor import walk

# The outermost group with at least this many iterations wins (coarse work, enough to share);
# without one, the group with the most iterations.
ENOUGH_ITERATIONS = 8


@dataclass(frozen=True)
class Phases:
    """`before`, then the top-level loop `nest` (with the parallel group `loops` inside it, each thread
    running the `prologue` and then a range of the group's flattened iterations), then `after` (on the
    calling thread, after the others' ranges or, `alongside`, beside them).
    Without a parallel group, `nest` is None, `loops` empty and everything is in `before`."""

    before: tuple[Stmt, ...]
    nest: For | None
    loops: tuple[For, ...]
    after: tuple[Stmt, ...]
    prologue: tuple[Stmt, ...] = ()
    # Not None: 'after' runs on the calling thread alongside the other threads' shares (`segments`), which
    # take `head` iterations' worth of its work off the caller's (`program.split_range`).
    head: int | None = None

    @property
    def alongside(self) -> bool:
        """Whether 'after' runs alongside the other threads' shares (see `head`)."""
        return self.head is not None

    @property
    def trips(self) -> tuple[int, ...]:
        """Iterations of each loop of the group, outermost first."""
        return tuple(_trips(loop) for loop in self.loops)

    @property
    def lets(self) -> tuple[Let, ...]:
        """The top-level lets of 'before', which the other functions evaluate again."""
        return tuple(s for s in self.before if isinstance(s, Let))

    @property
    def iterations(self) -> int:
        """Flattened iterations of the group (0 without one)."""
        return prod(self.trips) if self.loops else 0

    @property
    def around(self) -> tuple[For, ...]:
        """The loops around the group, outermost first: every thread runs them in full."""
        loops: list[For] = []
        current = self.nest
        while self.loops and current is not None and current is not self.loops[0]:
            loops.append(current)
            current = _single_loop(current.body)
        return tuple(loops)


def split(module: Module, verify: bool = True) -> Phases:
    """The phases of `module` (see the module docstring); without `verify`, as if the IR verifier agreed
    (for a model's sketch, which is an estimate's input, not a program)."""
    for phases in _splits(module):
        if not verify or _verified(module, (phases,)):
            return phases
    return Phases(_top(module.body), None, (), ())


def segments(module: Module, verify: bool = True, peeled: Collection[str] = ()) -> tuple[Phases, ...]:
    """The kernel as a sequence of segments, each split from what the segments before it left as `split`
    splits a kernel: a segment's 'before' runs on the calling thread, then its nest's parallel group on
    the threads, and the next segment starts when every thread is done. Only the last segment has an
    'after' (what no further parallel group was found in). An operator of several statements
    (Winograd's transforms and GEMMs, an LSTM step's gate maps) so shares each statement's nest, where
    `split` alone shares one. The chain is verified whole (`_verified`): first the chain of each
    remainder's first split, once; only where that fails, again as each segment is added. (Verified at
    each step, chains 1 to n segments long, Winograd F(2x2, 3x3)'s model tuning at 64 channels, 56², on
    two threads took 5.3 s; now 4.2, with the same pick.)

    `peeled`, for a sketch (every tile whole: `swauto.tuner.sketch`), names the loops whose shorter last
    tile lowering will peel into a copy of the loop's body after the loop: inside the loop around such
    a loop, that copy is a second statement, so no group is looked for below it. (Inception-v3's Mixed_6a
    3 x 3 at B = 8: the sketch of a candidate whose group sat below a tap loop, its column loop's last tile
    peeled, was priced on two threads, 51 ms; lowered, it ran on one, predicted 71 ms, and ranked first
    it ran at 0.73x PyTorch where a candidate the sketches had put below it ran at 1.38x.)"""
    chain = _segments(module, lambda found: True, peeled)
    if verify and chain[0].loops and not _verified(module, chain):
        chain = _segments(module, lambda found: _verified(module, found), peeled)
    if not (chain[-1].loops and chain[-1].after):
        return chain
    return (*chain[:-1], _alongside(chain[-1], {tensor.name for tensor in module.tensors}))


def _alongside(phases: Phases, tensors: set[str]) -> Phases:
    """`phases` with 'after' running alongside the nest (`Phases.alongside`, with its `head`) where no element
    of the `tensors` one of them writes is touched by the other, over every value of their loops; else as
    it is. (Local buffers need no check: every other thread has its own, and 'after' runs on the calling
    thread's after that thread's share, as it did after every share; the verifier already showed it
    reads nothing only a nest defined.)"""
    assert phases.nest is not None
    after, nest = Seq(phases.lets + phases.after), Seq((*phases.lets, phases.nest))
    touched = _touched(after, tensors)
    if touched is None or not _apart(touched, _touched(nest, tensors)):
        return phases
    per_iteration = _flops(nest) / phases.iterations
    return replace(phases, head=round(_flops(after) / per_iteration) if per_iteration else 0)


Box = tuple[str, bool, tuple[tuple[int, int], ...]]  # a tensor, whether it is written, each axis' index range


def _touched(stmt: Stmt, tensors: set[str]) -> list[Box] | None:
    """The boxes of the `tensors` `stmt`'s transfers and calls touch over every value of its loops, as each
    axis' first and last index; None where a bound is not known (a loop without constant bounds, an
    index the interval arithmetic cannot bound)."""
    boxes: list[Box] = []
    lets: dict[str, tuple[int, int]] = {}
    for node, loops in walk(stmt):
        if isinstance(node, Dma):
            found: tuple[tuple[Access, bool], ...] = ((node.tensor, node.direction == "put"),)
        elif isinstance(node, Call):  # an output it reads too is met by its write already
            found = tuple((access, role == call.output_role) for call in (node, *node.epilogue)
                          for role, access in call.operands)
        elif isinstance(node, Let):
            found = ()
        else:
            continue
        if not all(_constant_bounds(loop) for loop in loops):
            return None
        ranges = {**lets, **{loop.var: _range(loop) for loop in loops if _trips(loop)}}
        try:
            if isinstance(node, Let):
                lets[node.var] = bounds(node.value, ranges)
            for box, writes in ((access.bounding_box(), writes) for access, writes in found if access.name in tensors):
                spans = box.spans()
                if not all(isinstance(span, int) for span in spans):
                    return None
                boxes.append((box.name, writes, tuple((low, high + span - 1) for (low, high), span
                                                      in zip((bounds(start, ranges) for start in box.starts), spans,
                                                             strict=True))))
        except (KeyError, ValueError):
            return None
    return boxes


def _range(loop: For) -> tuple[int, int]:
    """The first and last value of a loop's variable (constant bounds, at least one iteration), least first."""
    first = loop.start.value
    last = first + (_trips(loop) - 1) * loop.stride
    return min(first, last), max(first, last)


def _apart(first: list[Box], second: list[Box] | None) -> bool:
    """Whether no box one of `first`, `second` writes meets a box of the same tensor in the other (None:
    boxes not known)."""
    if second is None:
        return False
    return not any(name == other and (writes or written) and all(lo <= high and low <= hi for (low, high), (lo, hi)
                                                                 in zip(ranges, others, strict=True))
                   for name, writes, ranges in first for other, written, others in second)


def _flops(stmt: Stmt) -> int:
    """The flops of the calls in `stmt`, each times it runs (guards counted: `analysis.executions`)."""
    return sum(node.flops * executions(loops, node.runs_if) for node, loops in walk(stmt) if isinstance(node, Call))


def _segments(module: Module, accept: Callable[[tuple[Phases, ...]], bool], peeled: Collection[str] = ()
              ) -> tuple[Phases, ...]:
    """`segments`, each segment the first split of what is left whose chain so far `accept`s."""
    found: list[Phases] = []
    body = module.body
    while True:
        phases = next((phases for phases in _splits(replace(module, body=body), peeled)
                       if accept((*found, phases))), None)
        if phases is None:  # nothing more to share: what is left runs after the last nest
            if not found:
                return (Phases(_top(body), None, (), ()),)
            return (*found[:-1], replace(found[-1], after=_top(body)[len(found[-1].lets):]))
        if not phases.after:
            return (*found, phases)
        found.append(replace(phases, after=()))
        body = Seq(phases.lets + phases.after)


def _top(body: Stmt) -> tuple[Stmt, ...]:
    return body.stmts if isinstance(body, Seq) else (body,)


def _splits(module: Module, peeled: Collection[str] = ()) -> Iterator[Phases]:
    """Each way to split `module`'s top level at a nest with a parallel group, the first nest first; not
    verified. (`peeled`: `segments`.)"""
    top = _top(module.body)
    written = _written(module.body) & {tensor.name for tensor in module.tensors}
    for position, stmt in enumerate(top):
        if not isinstance(stmt, For):
            continue
        before, after = top[:position], top[position + 1:]
        shared = _locals_used((stmt,)) & _locals_used(before + after)
        # Buffers the nest only reads, filled before it by gets alone: each thread fills its own. (A
        # buffer the nest fills too, such as a double buffer's first half, depends on the order of
        # the iterations: it keeps the nest on one thread.)
        prologue = tuple(s for s in before if _fills(s, shared))
        rest = tuple(s for s in before if not _fills(s, shared))
        if shared & _locals_used(rest) or {s.buffer.name for s in prologue} & (_written(stmt) | _filled(stmt)):
            continue
        group = _best_group(stmt, written, _let_vars(before), peeled)
        if group:
            yield Phases(rest, stmt, group, after, prologue)


def _verified(module: Module, chain: tuple[Phases, ...]) -> bool:
    """True when the IR verifier shows each function of the segments `chain` (the last one's 'after'
    holding the rest of the kernel) reads only buffers it, or an earlier function on its workspace,
    defined: each segment's 'before' and nest, then the last 'after', run on the calling thread's
    workspace; each nest alone (its prologue first) on every other thread's, as a worker may have had
    no share of the segments before; and the calling thread's functions read nothing only a nest
    defined (it ran only some of the nest's iterations, or none)."""
    def nest(phases: Phases) -> Seq:
        return Seq((*phases.lets, *phases.prologue, phases.nest))

    after = Seq(chain[0].lets + chain[-1].after)
    caller = [function for phases in chain for function in (Seq(phases.before), nest(phases))]
    least = [function for phases in chain for function in (Seq(phases.before), Seq(phases.lets + phases.prologue))]
    try:
        verify_functions(module, [[*caller, after], *([nest(phases)] for phases in chain), [*least, after]],
                         "host phases")
    except VerificationError:
        return False
    return True


def _filled(stmt: Stmt) -> set[str]:
    """Names of the buffers DMA gets in `stmt` fill."""
    return {node.buffer.name for node, _ in walk(stmt) if isinstance(node, Dma) and node.direction == "get"}


def _fills(stmt: Stmt, buffers: set[str]) -> bool:
    """True for a get into, or a zeroing of, one of `buffers`."""
    return (isinstance(stmt, Dma) and stmt.direction == "get" or isinstance(stmt, Zero)) and \
        stmt.buffer.name in buffers


def _best_group(nest: For, written: set[str], allowed: set[str], peeled: Collection[str] = ()
                ) -> tuple[For, ...]:
    """The parallel group chosen in `nest` (see ENOUGH_ITERATIONS), or () when there is none. With
    `peeled` (`segments`), as in the lowered nest: no deeper than the loop around the first of them, no
    group past one but at its top, and there it has a loop's whole tiles, one iteration fewer."""
    def iterations(group: tuple[For, ...]) -> int:
        return prod(_trips(loop) - (loop.var in peeled) for loop in group)

    accesses = _tensor_accesses(nest, written)
    groups = []
    current: Stmt | None = nest
    while isinstance(current, For):
        group = _group_at(current, accesses, allowed, peeled)
        if group and iterations(group) >= 2:
            groups.append(group)
        child = _single_loop(current.body)
        if child is None or child.var in peeled or _writes(current.body, besides=child):
            break  # the loops around a group may not write memory: every thread runs them
        current = child
    for group in groups:
        if iterations(group) >= ENOUGH_ITERATIONS:
            return group
    return max(groups, key=iterations, default=())


def _group_at(loop: For, accesses: list[Access], allowed: set[str], peeled: Collection[str] = ()
              ) -> tuple[For, ...]:
    """The longest perfect nest from `loop` down whose loops each split the written tensors (and,
    below `loop`, none of `peeled`: `segments`)."""
    group: list[For] = []
    current: Stmt = loop
    while isinstance(current, For) and _constant_bounds(current) and not (group and current.var in peeled) and (
            _trips(current) == 1 or _disjoint(current, accesses, allowed)):
        group.append(current)
        current = current.body.stmts[0] if isinstance(current.body, Seq) and len(current.body.stmts) == 1 \
            else current.body
    return tuple(group)


def _single_loop(body: Stmt) -> For | None:
    """The one `For` directly in `body` (itself, or the only loop of a Seq), else None."""
    if isinstance(body, For):
        return body
    if isinstance(body, Seq):
        loops = [s for s in body.stmts if isinstance(s, For)]
        return loops[0] if len(loops) == 1 else None
    return None


def _writes(body: Stmt, besides: Stmt) -> bool:
    """True when `body`, outside the statement `besides`, writes memory or computes."""
    stmts = body.stmts if isinstance(body, Seq) else (body,)
    for stmt in stmts:
        if stmt is besides:
            continue
        for node, _ in walk(stmt):
            if isinstance(node, Call) or isinstance(node, Dma) and node.direction == "put":
                return True
    return False


def _disjoint(loop: For, accesses: list[Access], allowed: set[str]) -> bool:
    """True when, for every written tensor, all its accesses in the nest share one axis whose start is
    `c * loop.var + r` (r using only `allowed` variables) with an extent of at most |c| * stride:
    then different iterations of `loop` touch disjoint slabs of it."""
    by_tensor: dict[str, list[Access]] = {}
    for access in accesses:
        by_tensor.setdefault(access.name, []).append(access)
    for group in by_tensor.values():
        common: set[tuple[int, int, str]] | None = None
        for access in group:
            slabs = set()
            for axis, (start, extent) in enumerate(zip(access.starts, access.extents, strict=True)):
                form = linear_form(start)
                if form is None:
                    continue
                coefficients, constant = form
                c = coefficients.get(loop.var, 0)
                rest = {name: k for name, k in coefficients.items() if name != loop.var}
                if c and set(rest) <= allowed and extent <= abs(c) * abs(loop.stride):
                    slabs.add((axis, c, repr((sorted(rest.items()), constant))))
            common = slabs if common is None else common & slabs
        if not common:
            return False
    return True


def _tensor_accesses(stmt: Stmt, written: set[str]) -> list[Access]:
    found = []
    for node, _ in walk(stmt):
        if isinstance(node, Dma) and node.tensor.name in written:
            found.append(node.tensor.bounding_box())
        elif isinstance(node, Call):
            found.extend(access for _, access in node.operands if access.name in written)
    return found


def _written(body: Stmt) -> set[str]:
    """Names of everything `body` writes in main memory or through a primitive (buffers included)."""
    written = set()
    for node, _ in walk(body):
        if isinstance(node, Dma) and node.direction == "put":
            written.add(node.tensor.name)
        elif isinstance(node, Call):
            written.add(node.output.name)
    return written


def _locals_used(stmts: tuple[Stmt, ...]) -> set[str]:
    """Names of everything DMAs and primitives in `stmts` touch on their local side."""
    used = set()
    for stmt in stmts:
        for node, _ in walk(stmt):
            if isinstance(node, Dma):
                used.add(node.buffer.name)
            elif isinstance(node, Call):
                used.update(access.name for _, access in node.operands)
    return used


def _let_vars(stmts: tuple[Stmt, ...]) -> set[str]:
    return {stmt.var for stmt in stmts if isinstance(stmt, Let)}


def _constant_bounds(loop: For) -> bool:
    return isinstance(loop.start, Const) and isinstance(loop.stop, Const) and loop.stride != 0


def _trips(loop: For) -> int:
    assert isinstance(loop.start, Const) and isinstance(loop.stop, Const)
    span = loop.stop.value - loop.start.value
    return max(0, -(-span // loop.stride))
