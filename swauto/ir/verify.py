"""The IR verifier: the invariants every pass promises, checked on its output.

`verify(module)` raises `VerificationError` (a bug in swauto, not in the user's file) unless:

- every access names a tensor or a local buffer of the module, with one start, extent and dimension
  per axis and no empty axis, and every `alloc` names a local buffer;
- every box stays inside its tensor or buffer for every value the loop variables take (zero-filled
  gets may reach outside their tensor), following the conditions of the `If`s around it;
- every buffer a primitive or a put reads holds data on every path to it (a get or a zeroing wrote
  it before), and every generated function reads only what it or an earlier function on the same
  workspace defined (the host's thread phases: `verify_functions`);
- no statement touches a box of a local buffer that a transfer still in flight moves, no transfer
  of a tensor box is issued while another, overlapping one of which either is a put is in flight,
  and every transfer is waited for before the program ends;
- an exchanged transfer moves a buffer spread over the mesh (`swauto.passes.exchange_transfers`).

Boxes are compared by `swauto.ir.dependence` (sound: "disjoint" only when proven). A loop's first
iteration sees the transfers in flight before it; the others see what the iteration before left. A
transfer still in flight from the iteration just before (issued in it with the loops inside it at one
value each: a write-back double buffered over a chain of loops) is compared at that iteration's
values of the variables; one from further back, as if its variables were independent of the current
ones. `SWAUTO_VERIFY=1` makes the pipeline verify the IR after every stage.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from swauto.ir import expr as ex
from swauto.ir.dependence import disjoint, disjoint_anywhere, loop_range
from swauto.ir.nodes import Access, Alloc, Call, Compare, Dma, DmaWait, For, If, Let, Module, Seq, Stmt, Zero
from swauto.ir.printer import format_stmt
from swauto.ir.visitor import Visitor, walk

Ranges = dict[str, tuple[int, int]]
_NEGATE = {"<": ">=", "<=": ">", "==": "!=", "!=": "==", ">": "<=", ">=": "<"}
_REFINE_LIMIT = 1 << 12  # values of a variable tried one by one to narrow its range under a condition
ENV_VAR = "SWAUTO_VERIFY"


class VerificationError(Exception):
    """The IR breaks an invariant a pass promised: a bug in swauto."""


def enabled() -> bool:
    """True when `SWAUTO_VERIFY` asks the pipeline to verify every stage."""
    return os.environ.get(ENV_VAR, "") not in ("", "0")


@dataclass(frozen=True, eq=False)
class _InFlight:
    """A transfer issued and not yet waited for, with the variables' ranges where it was issued;
    `earlier` when it comes from an earlier iteration of a loop (its variables had other values);
    `previous` (loop variable, its step, the values of the loops inside it) when it comes from the
    iteration just before of that loop. Two are equal when they are the same statement of the module
    issued under the same ranges."""

    dma: Dma
    ranges: tuple[tuple[str, tuple[int, int]], ...]
    earlier: bool = False
    previous: tuple[str, int, tuple[tuple[str, int], ...]] | None = None

    def _key(self) -> tuple:
        return id(self.dma), self.ranges, self.earlier, self.previous

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _InFlight) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True)
class _State:
    defined: frozenset[str]
    in_flight: frozenset[_InFlight]


def verify(module: Module, stage: str = "", asynchronous: bool = True, verified: Module | None = None) -> None:
    """Raise `VerificationError` unless `module` keeps the invariants above. Without `asynchronous` (a
    target whose transfers complete as they are issued) the rules on transfers in flight do not apply.
    `verified`, a module that passed (the stage before): where `module` holds its very statements and
    buffers and only adds allocations at the top (as `plan_local_memory` adds float64 copies), only those
    are checked; the walk would repeat the same checks on the same statements."""
    checker = _Checker(module, stage, asynchronous)
    if verified is not None and _adds_only_allocations(verified, module):
        for stmt in module.body.stmts if isinstance(module.body, Seq) else (module.body,):
            if isinstance(stmt, Alloc):
                checker.visit_Alloc(stmt, _State(frozenset(), frozenset()), {})
        return
    checker.names(module.body)
    state = checker.visit(module.body, _State(frozenset(), frozenset()), {})
    if state.in_flight:
        raise checker.error(next(iter(state.in_flight)).dma, "is never waited for")


def _adds_only_allocations(before: Module, after: Module) -> bool:
    """True when `after` has `before`'s tensors, its buffers (offsets aside) among its own, and the same
    statement objects at the top apart from allocations."""
    def statements(module: Module) -> list[Stmt]:
        body = module.body.stmts if isinstance(module.body, Seq) else (module.body,)
        return [stmt for stmt in body if not isinstance(stmt, Alloc)]

    buffers = {b.name: (b.shape, b.dtype, b.spread) for b in after.buffers}
    old, new = statements(before), statements(after)
    same = len(old) == len(new) and all(a is b for a, b in zip(old, new, strict=True))
    return same and before.tensors == after.tensors and \
        all(buffers.get(b.name) == (b.shape, b.dtype, b.spread) for b in before.buffers)


def verify_functions(module: Module, workspaces: Iterable[Iterable[Stmt]], stage: str = "") -> None:
    """Raise `VerificationError` unless every generated function of `module` (a backend's thread
    phases) reads only buffers it, or an earlier function on its workspace, defined. Each item of
    `workspaces` lists the functions that run one after another on one workspace. `module` itself is
    taken as verified; its transfers are taken as complete when issued."""
    checker = _Checker(module, stage, asynchronous=False, check_boxes=False)
    for functions in workspaces:
        defined: frozenset[str] = frozenset()
        for function in functions:
            defined = checker.visit(function, _State(defined, frozenset()), {}).defined


class _Checker(Visitor):
    def __init__(self, module: Module, stage: str, asynchronous: bool, check_boxes: bool = True) -> None:
        self.module = module
        self.stage = stage
        self.asynchronous = asynchronous
        self.check_boxes = check_boxes
        self.checked: set[tuple[int, tuple]] = set()  # (statement, ranges) whose boxes were checked
        self.shapes = {t.name: t.shape for t in module.tensors}
        self.buffers = {b.name: b.shape for b in module.buffers}
        self.spreads = {b.name: b.spread for b in module.buffers}

    def error(self, stmt: Stmt, problem: str) -> VerificationError:
        where = f" after {self.stage}" if self.stage else ""
        text = format_stmt(stmt)[0].split("  #")[0].strip()
        return VerificationError(f"IR of {self.module.name}{where}: `{text}` {problem}")

    # --- names and ranks ----------------------------------------------------------------------

    def names(self, body: Stmt) -> None:
        for node, _ in walk(body):
            for access, kind in _accesses(node):
                shapes = self.shapes if kind == "tensor" else self.buffers if kind == "buffer" \
                    else {**self.shapes, **self.buffers}
                if access.name not in shapes:
                    raise self.error(node, f"names {access.name}, which is not a {kind or 'tensor or buffer'}")
                rank = len(shapes[access.name])
                axes = len(access.walks) if access.walks else rank
                if not len(access.starts) == len(access.extents) == len(access.dims) == axes or \
                        access.pad and len(access.pad) != axes or access.steps and len(access.steps) != axes:
                    raise self.error(node, f"does not give one start, extent and dimension per axis of {access.name}")
                if access.walks and (access.name in self.buffers or sorted(set(access.walks)) != list(range(rank))):
                    raise self.error(node, f"walks axes {list(access.walks)} of {access.name}, which is not a window "
                                           f"of a tensor of rank {rank}")
                if any(isinstance(extent, int) and extent < 1 for extent in access.extents):
                    raise self.error(node, f"has an empty axis of {access.name}")

    def boxes(self, stmt: Stmt, ranges: Ranges) -> None:
        """Every box of the leaf `stmt` inside its tensor or buffer, for the values the variables take
        where it runs (once per statement and ranges: a loop's body is walked again to a fixpoint)."""
        key = (id(stmt), tuple(sorted(ranges.items())))
        if not self.check_boxes or key in self.checked:
            return
        self.checked.add(key)
        if isinstance(stmt, Dma):
            self.inside(stmt, stmt.tensor, self.shapes[stmt.tensor.name], ranges, outside_ok=stmt.zero_fill)
        for access, kind in _accesses(stmt):
            if access.name in self.buffers and kind != "tensor":
                self.inside(stmt, access, self.buffers[access.name], ranges)

    def span(self, loop: For, ranges: Ranges) -> tuple[int, int] | None:
        """The first and last value of `loop.var` (bounds when they vary with outer loops; None when
        the loop never runs)."""
        span = loop_range(loop)
        if span is None and ex.free_vars(loop.start) | ex.free_vars(loop.stop):
            span = (self.bounds(loop.start, ranges, loop)[0], self.bounds(loop.stop, ranges, loop)[1] - 1)
        return span

    # --- the walk -------------------------------------------------------------------------------

    def visit_Seq(self, stmt: Seq, state: _State, ranges: Ranges) -> _State:
        for child in stmt.stmts:
            if isinstance(child, Let):
                ranges = {**ranges, child.var: self.bounds(child.value, ranges, child)}
            else:
                state = self.visit(child, state, ranges)
        return state

    def visit_For(self, stmt: For, state: _State, ranges: Ranges) -> _State:
        return self.loop(stmt, state, ranges)

    def visit_If(self, stmt: If, state: _State, ranges: Ranges) -> _State:
        branches = [(stmt.then, stmt.cond), (stmt.otherwise, _negated(stmt.cond))]
        states = []
        for branch, cond in branches:
            narrowed = _refine(cond, ranges)
            if narrowed is not None:  # else the branch never runs
                states.append(state if branch is None else self.visit(branch, state, narrowed))
        if not states:
            return state
        return _State(frozenset.intersection(*(s.defined for s in states)),
                      frozenset.union(*(s.in_flight for s in states)))

    def visit_Alloc(self, stmt: Alloc, state: _State, ranges: Ranges) -> _State:
        if stmt.buffer not in self.buffers:
            raise self.error(stmt, f"allocates {stmt.buffer}, which is not a local buffer of the module")
        return state

    def visit_DmaWait(self, stmt: DmaWait, state: _State, ranges: Ranges) -> _State:
        return replace(state, in_flight=frozenset(f for f in state.in_flight if f.dma.reply != stmt.reply))

    def visit_Zero(self, stmt: Zero, state: _State, ranges: Ranges) -> _State:
        self.boxes(stmt, ranges)
        self.local(stmt, stmt.buffer, state, ranges, reads=False)
        return replace(state, defined=state.defined | {stmt.buffer.name})

    def visit_Call(self, stmt: Call, state: _State, ranges: Ranges) -> _State:
        self.boxes(stmt, ranges)
        if stmt.runs_if:  # skipped where a guard fails: it must only add, on variables defined here
            if stmt.overwrite or not stmt.signature.reads_output():
                raise self.error(stmt, "is guarded (runs_if) but defines its output instead of adding to it")
            unknown = set().union(*(ex.free_vars(c.left) | ex.free_vars(c.right) for c in stmt.runs_if)) - ranges.keys()
            if unknown:
                raise self.error(stmt, f"is guarded by {sorted(unknown)}, which no loop around it defines")
        signature = stmt.signature
        for role, access in stmt.operands:
            if access.name in self.buffers:
                reads = role != signature.output_role or signature.reads_output() and not stmt.overwrite
                self.local(stmt, access, state, ranges, reads=reads)
        if stmt.output.name in self.buffers:  # a stored result defines its tile
            return replace(state, defined=state.defined | {stmt.output.name})
        return state

    def generic_visit(self, stmt: Stmt, state: _State, ranges: Ranges) -> _State:
        return state  # a Let outside a Seq

    def loop(self, loop: For, state: _State, ranges: Ranges) -> _State:
        span = self.span(loop, ranges)
        if span is None:
            return state  # the loop never runs
        first, last = span
        # A transfer in flight from the iteration just before of a loop around this one (a write-back
        # double buffered over both) meets only this loop's first iteration: that one is checked
        # apart, and the others with what the iteration before them left.
        peel = last > first and any(flight.previous is not None for flight in state.in_flight)
        base, rest = state.in_flight, span
        if peel:
            out = self.visit(loop.body, state, {**ranges, loop.var: (first, first)})
            base, rest = self.carried(out, state, loop, ranges, span), (first + loop.stride, last)
        entry = _State(state.defined, base)
        for _ in range(4):  # transfers left in flight by one iteration reach the next one
            out = self.visit(loop.body, entry, {**ranges, loop.var: rest})
            following = _State(state.defined, base | self.carried(out, state, loop, ranges, span))
            if following == entry:
                break
            entry = following
        # After the loop, what its last iteration left is in flight: those issued in it, at the loop
        # variable's last value (not the prefetches issued only in earlier iterations, whose recorded
        # range excludes it), and those from before it, from further back.
        left = set()
        for flight in out.in_flight:
            issued = dict(flight.ranges)
            if flight in state.in_flight:
                left.add(flight)
            elif issued.get(loop.var, span)[1] >= last:
                fresh = not flight.earlier and flight.previous is None
                left.add(replace(flight, ranges=tuple(sorted({**issued, loop.var: (last, last)}.items())))
                         if fresh else replace(flight, earlier=True, previous=None))
        return _State(out.defined, frozenset(left))

    @staticmethod
    def carried(out: _State, before: _State, loop: For, ranges: Ranges, span: tuple[int, int]
                ) -> frozenset[_InFlight]:
        """The transfers an iteration of `loop` leaves in flight, as the next iteration sees them: those
        from before the loop as they are; those it issued with every loop inside it at one value as
        from the iteration just before (`_InFlight.previous`), the others as from an earlier one. The
        loop variable's recorded range widens to the loop's `span` (the first iteration's and the
        others' then carry the same)."""
        carried = set()
        for flight in out.in_flight:
            if flight in before.in_flight:
                carried.add(flight)
                continue
            issued = dict(flight.ranges)
            inner = {name: bounds for name, bounds in issued.items() if name not in ranges and name != loop.var}
            widened = tuple(sorted({**issued, loop.var: span}.items()))
            if not flight.earlier and flight.previous is None and all(low == high for low, high in inner.values()):
                values = tuple((name, low) for name, (low, _) in sorted(inner.items()))
                carried.add(replace(flight, ranges=widened, previous=(loop.var, loop.stride, values)))
            else:
                carried.add(replace(flight, ranges=widened, earlier=True, previous=None))
        return frozenset(carried)

    # --- leaves ---------------------------------------------------------------------------------

    def visit_Dma(self, dma: Dma, state: _State, ranges: Ranges) -> _State:
        self.boxes(dma, ranges)
        if dma.direction not in ("get", "put"):
            raise self.error(dma, f"has direction {dma.direction!r}")
        if dma.exchanged and self.spreads.get(dma.buffer.name) != "mesh":
            raise self.error(dma, "is exchanged, but its buffer is not spread over the mesh")
        self.local(dma, dma.buffer, state, ranges, reads=dma.direction == "put")
        for flight in state.in_flight:
            other = flight.dma
            if other.tensor.name == dma.tensor.name and "put" in (dma.direction, other.direction) and \
                    not _apart(flight, other.tensor, dma.tensor, ranges):
                raise self.error(dma, f"moves a box of {dma.tensor.name} that a {other.direction} still in flight "
                                      f"(`{format_stmt(other)[0].split('  #')[0].strip()}`) may overlap")
        defined = state.defined | {dma.buffer.name} if dma.direction == "get" else state.defined
        if not self.asynchronous:
            return _State(defined, state.in_flight)
        return _State(defined, state.in_flight | {_InFlight(dma, tuple(sorted(ranges.items())))})

    def local(self, stmt: Stmt, access: Access, state: _State, ranges: Ranges, reads: bool) -> None:
        """Checks of a statement touching `access` of a local buffer."""
        if reads and access.name not in state.defined:
            raise self.error(stmt, f"reads {access.name} where no statement has written it on some path")
        for flight in state.in_flight:
            if flight.dma.buffer.name == access.name and not _apart(flight, flight.dma.buffer, access, ranges):
                raise self.error(stmt, f"touches {access.name} while a transfer of it is in flight "
                                       f"(`{format_stmt(flight.dma)[0].split('  #')[0].strip()}`)")

    def inside(self, stmt: Stmt, access: Access, shape: tuple[int, ...], ranges: Ranges,
               outside_ok: bool = False) -> None:
        if outside_ok or not all(isinstance(extent, int) for extent in access.extents):
            return
        access = access.bounding_box()
        for axis, (start, extent, size) in enumerate(zip(access.starts, access.spans(), shape, strict=True)):
            low, high = self.bounds(start, ranges, stmt)
            if low < 0 or high + extent > size:
                raise self.error(stmt, f"may leave {access.name} along axis {axis} (indices {low}..{high + extent - 1}"
                                       f" of 0..{size - 1})")

    def bounds(self, value: ex.Expr, ranges: Ranges, stmt: Stmt) -> tuple[int, int]:
        try:
            return ex.bounds(value, ranges)
        except (ValueError, KeyError) as error:
            raise self.error(stmt, f"uses {value}, which has no known bounds ({error})") from None


def _accesses(node: Stmt) -> list[tuple[Access, str]]:
    """The accesses of a statement and what each must name: 'tensor', 'buffer' or '' (either)."""
    if isinstance(node, Dma):
        return [(node.tensor, "tensor"), (node.buffer, "buffer")]
    if isinstance(node, Zero):
        return [(node.buffer, "buffer")]
    if isinstance(node, Call):
        return [(access, "") for _, access in node.transfers]
    return []


def _apart(flight: _InFlight, in_flight: Access, access: Access, ranges: Ranges) -> bool:
    """True when the box `in_flight` of a transfer in flight provably shares no element with
    `access` (both of one array), given the ranges where each was issued."""
    issued = dict(flight.ranges)
    in_flight, access = in_flight.bounding_box(), access.bounding_box()
    if flight.earlier:
        return disjoint_anywhere(in_flight.starts, in_flight.spans(), issued, access.starts, access.spans(), ranges)
    if flight.previous is not None:
        # Issued one step of the loop back, with each loop inside it at the one value of its range.
        var, stride, inner = flight.previous
        low, high = issued.pop(var)
        mapping: dict[str, ex.Expr] = {var: ex.Var(var) - stride}
        for name, value in inner:
            mapping[name] = ex.Const(value)
            del issued[name]
        in_flight = replace(in_flight, starts=tuple(ex.substitute(start, mapping) for start in in_flight.starts))
        issued[var] = (low + stride, high + stride)
    both = dict(ranges)
    for name, (low, high) in issued.items():
        if name in both:
            low, high = max(low, both[name][0]), min(high, both[name][1])
            if low > high:
                return True  # the two are never issued with the same value of this variable
        both[name] = (low, high)
    return disjoint(in_flight.starts, in_flight.spans(), access.starts, access.spans(), both)


def _negated(cond: Compare) -> Compare:
    return Compare(_NEGATE[cond.op], cond.left, cond.right)


def _refine(cond: Compare, ranges: Mapping[str, tuple[int, int]]) -> Ranges | None:
    """`ranges` with the range of the one variable of `cond` narrowed to the values that satisfy it
    (exactly when `cond` is affine, by trying each value when its range is short); None when no value
    does (the path never runs). Conditions on several variables narrow nothing."""
    names = ex.free_vars(cond.left) | ex.free_vars(cond.right)
    if not names:
        return dict(ranges) if cond.holds({}) else None
    if len(names) != 1 or next(iter(names)) not in ranges:
        return dict(ranges)
    (name,) = names
    low, high = ranges[name]
    form = ex.linear_form(ex.simplify(cond.left - cond.right))
    if form is not None:
        c, k = form[0].get(name, 0), form[1]
        # The condition as constraints c * v + k < 0 ('!=' narrows nothing).
        constraints = {"<": [(c, k)], "<=": [(c, k - 1)], ">": [(-c, -k)], ">=": [(-c, -k - 1)],
                       "==": [(c, k - 1), (-c, -k - 1)], "!=": []}[cond.op]
        if cond.op == "!=" and c and k % c == 0:  # one value fails it: drop it where it ends the range
            low, high = low + (low == -k // c), high - (high == -k // c)
        for a, b in constraints:
            if a > 0:
                high = min(high, (-b - 1) // a)
            elif a < 0:
                low = max(low, -((-b - 1) // -a))  # v >= ceil((b + 1) / -a)
            elif b >= 0:
                return None
    elif high - low <= _REFINE_LIMIT:
        values = [v for v in range(low, high + 1) if cond.holds({name: v})]
        low, high = (min(values), max(values)) if values else (1, 0)
    return None if low > high else {**ranges, name: (low, high)}
