"""Boundary peeling: the first half of boundary handling (thesis 6.2.4.5).

Guarantees: every loop bound, access extent and primitive size in the result is a constant. When a
split leaves a shorter last tile (an extent `min(factor, rest)`), the last iteration of the loop
that decides it is peeled off into its own copy of the loop body, where the remainder is a constant
and the primitive is called at the remainder's size ("primitive switching"; `pad_primitive` pads
the sizes the primitive cannot take). The loop keeps the full iterations.
"""

from __future__ import annotations

from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.nests import loop_nest, map_statements
from swauto.ir.nodes import Access, Call, For, Module, Seq, Stmt, seq
from swauto.schedule.transforms import substitute_call, substitute_loops

Ranges = dict[str, tuple[int, int]]


def _exprs(loops: list[For], call: Call):
    for loop in loops:
        yield loop.start
        yield loop.stop
    for _, value in call.sizes:
        yield ex.as_expr(value)
    for _, access in call.transfers:
        yield from (ex.as_expr(e) for e in access.extents)


def _needs_peel(var: str, loops: list[For], call: Call, ranges: Ranges) -> bool:
    return any(
        not isinstance(simple, ex.Const) and var in ex.free_vars(simple)
        for simple in (ex.simplify_in(e, ranges) for e in _exprs(loops, call))
    )


def _constant(value: ex.Expr | int, ranges: Ranges) -> int:
    simple = ex.simplify_in(ex.as_expr(value), ranges)
    assert isinstance(simple, ex.Const), f"extent {value} is not constant after peeling"
    return simple.value


def _settle(call: Call, ranges: Ranges) -> Call:
    def access(_: str, a: Access) -> Access:
        return replace(a, extents=tuple(_constant(e, ranges) for e in a.extents))

    settled = call.with_operands(access).with_sizes({dim: _constant(value, ranges) for dim, value in call.sizes})
    return replace(settled, epilogue=tuple(_settle(consumer, ranges) for consumer in call.epilogue))


def _peel(loops: list[For], call: Call, ranges: Ranges) -> Stmt:
    if not loops:
        return _settle(call, ranges)
    loop, rest = loops[0], loops[1:]
    start, stop = _constant(loop.start, ranges), _constant(loop.stop, ranges)
    if stop <= start:
        return Seq(())
    inside = {**ranges, loop.var: (start, stop - 1)}
    if not _needs_peel(loop.var, rest, call, inside):
        return For(loop.var, ex.Const(start), ex.Const(stop), 1, _peel(rest, call, inside))
    parts: list[Stmt] = []
    if stop - 1 > start:
        full = {**ranges, loop.var: (start, stop - 2)}
        parts.append(For(loop.var, ex.Const(start), ex.Const(stop - 1), 1, _peel(rest, call, full)))
    last = {loop.var: ex.Const(stop - 1)}
    last_loops, last_call = substitute_loops(rest, last), substitute_call(call, last)
    parts.append(_peel(last_loops, last_call, ranges))
    return seq(*parts)


def peel_boundaries(module: Module) -> Module:
    return map_statements(module, lambda _, nest: [_peel(*loop_nest(nest), {})])
