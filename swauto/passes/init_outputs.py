"""Overwritten outputs: a statement that overwrites its output starts every tile it writes from the
identity of its primitive's combine (0 for a sum or a GEMM, -inf for a maximum).

Guarantees: every nest whose call has `overwrite` set and whose primitive combines into its output
is preceded by a nest that fills each output tile the call writes with that identity: the same
loops that index the output, in the same order, around a `fill` of the same box. The exception is a
sum whose every output tile is completed inside the loops that move the output: those loops run
outside all others, which only reduce into the tile (a GEMM whose K is not split, or whose K loop is
innermost; a depthwise convolution's kernel taps inside its pixels), and distinct iterations of
them write disjoint tiles. It keeps `overwrite`, and `infer_dma` zeroes the tile in local memory
where its transfer sits, before the reducing loops, instead of reading it. Afterwards no other call
has `overwrite` set, and every other statement is unchanged. A primitive that stores its result (a
map) overwrites by itself: its flag is only cleared. Tiles are written exactly as the call writes
them, so the fill covers what the statement overwrites and nothing else. With `in_tiles=False`
there is no exception (the reference interpreter runs calls one by one: nothing zeroes a tile).
"""

from __future__ import annotations

from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.dependence import value_ranges
from swauto.ir.nests import loop_nest, map_statements, outermost, rebuild_nest, statements
from swauto.ir.nodes import Call, For, Module, Stmt
from swauto.primitives.registry import IDENTITY


def _fill(loops: list[For], call: Call) -> Stmt:
    """The nest that sets each output tile of `call` to its combine's identity."""
    out = call.output
    used = set().union(*(ex.free_vars(start) for start in out.starts),
                       *(ex.free_vars(ex.as_expr(extent)) for extent in out.extents))
    carried = [dim for dim in call.signature.dims if dim in out.dims]
    fill = Call("fill", tuple((dim, call.size(dim)) for dim in carried), (("Z", out),),
                constant=IDENTITY[call.signature.combine])
    body: Stmt = fill
    for loop in reversed([loop for loop in loops if loop.var in used]):
        body = For(loop.var, loop.start, loop.stop, loop.stride, body)
    return body


def moving_loops(loops: list[For], call: Call) -> frozenset[str] | None:
    """The loops that move the output of a sum whose output tiles may each be computed whole inside one
    iteration of them, no other iteration touching it: each steps one axis of the output of its own, and
    the loops stepping an axis (a split's outer and inner loop both may) step it in mixed radix, each by
    at least the box's largest extent there (a last tile's may be shorter) plus the span of those that step
    it by less (a scatter, whose boxes overlap, may not). Those iterations complete the tiles where the
    loops run outside all others (`swauto.ir.nests.outermost`), which only reduce into the tile. None
    where no order of `loops` does."""
    if call.signature.combine != "+":
        return None
    out = call.output
    forms = [ex.linear_form(start) for start in out.starts]
    steps = [form[0] for form in forms if form is not None]  # per axis, each variable's coefficient
    if len(steps) != len(forms):
        return None
    stepping: dict[int, list[For]] = {}  # per axis of the output, the loops stepping it
    for loop in loops:
        axes = [axis for axis, coefficients in enumerate(steps) if coefficients.get(loop.var)]
        if len(axes) > 1:
            return None
        if axes:
            stepping.setdefault(axes[0], []).append(loop)
    ranges = value_ranges(loops)
    for axis, stepped in stepping.items():
        coefficients = steps[axis]
        # Two iterations that differ first (by the largest step) in loop v lie at least v's step minus
        # the spread of the loops stepping by less apart: no less than the extent, so their boxes are apart.
        reach = _largest(out.extents[axis], ranges)
        for loop in sorted(stepped, key=lambda loop: abs(coefficients[loop.var]) * loop.stride):
            step = abs(coefficients[loop.var])
            if step * loop.stride < reach:
                return None
            if len(stepped) > 1:
                if loop.var not in ranges:
                    return None
                first, last = ranges[loop.var]
                reach += step * (last - first)
    return frozenset(loop.var for stepped in stepping.values() for loop in stepped)


def _largest(extent: int | ex.Expr, ranges: dict[str, tuple[int, int]]) -> float:
    """The largest value of a box's extent (a last tile's `min(...)` until `peel_boundaries`
    settles it); infinite where it cannot be bounded."""
    if isinstance(extent, int):
        return extent
    try:
        return ex.bounds(extent, ranges)[1]
    except (ValueError, KeyError):
        return float("inf")


def init_outputs(module: Module, in_tiles: bool = True) -> Module:
    if not any(loop_nest(nest)[1].overwrite for nest in statements(module)):
        return module

    def initialised(_: int, nest: Stmt) -> list[Stmt]:
        loops, call = loop_nest(nest)
        moving = moving_loops(loops, call) if in_tiles else None
        if not call.overwrite or moving is not None and outermost((loop.var for loop in loops), moving):
            return [nest]
        cleared = rebuild_nest(loops, replace(call, overwrite=False))
        return [_fill(loops, call), cleared] if call.signature.combine else [cleared]

    return map_statements(module, initialised)
