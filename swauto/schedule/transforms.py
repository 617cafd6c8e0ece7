"""Loop transforms on a perfect loop nest around one primitive call. Each is a pure `Module -> Module`."""

from __future__ import annotations

from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.nodes import Access, For, Gemm, Module, Stmt


def loop_nest(body: Stmt) -> tuple[list[For], Gemm]:
    """The loops of a perfect nest, outermost first, and the call at its bottom."""
    loops = []
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    if not isinstance(body, Gemm):
        raise ValueError("not a perfect loop nest around one primitive call")
    return loops, body


def _rebuild(loops: list[For], call: Gemm) -> Stmt:
    body: Stmt = call
    for loop in reversed(loops):
        body = For(loop.var, loop.start, loop.stop, loop.stride, body)
    return body


def _tile_access(access: Access, dim: str, start: ex.Expr, factor: int) -> Access:
    starts, extents = list(access.starts), list(access.extents)
    for axis, carried in enumerate(access.dims):
        if carried == dim:
            starts[axis] = starts[axis] + start
            extents[axis] = factor
    return replace(access, starts=tuple(starts), extents=tuple(extents))


def split_primitive(module: Module, dim: str, factor: int, loop: str) -> Module:
    """Tile primitive dimension `dim` by `factor`: a new innermost loop `loop` walks the tiles and the
    call works on one tile. `factor` must divide the dimension (boundaries are not handled here)."""
    loops, call = loop_nest(module.body)
    size = {"M": call.m, "N": call.n, "K": call.k}[dim]
    assert size % factor == 0, "split_primitive needs a factor that divides the dimension"
    start = ex.Var(loop) * factor
    tiled = replace(
        call,
        **{dim.lower(): factor},
        a=_tile_access(call.a, dim, start, factor) if dim in ("M", "K") else call.a,
        b=_tile_access(call.b, dim, start, factor) if dim in ("K", "N") else call.b,
        c=_tile_access(call.c, dim, start, factor) if dim in ("M", "N") else call.c,
    )
    new_loop = For(loop, ex.Const(0), ex.Const(size // factor), 1, tiled)
    return replace(module, body=_rebuild([*loops, new_loop], tiled))


def split_loop(module: Module, var: str, factor: int, outer: str, inner: str) -> Module:
    """Split loop `var` into `outer` (over blocks of `factor`) and `inner` (within a block); uses of
    `var` become `outer * factor + inner`. `factor` must divide the trip count."""
    loops, call = loop_nest(module.body)
    index = next(i for i, loop in enumerate(loops) if loop.var == var)
    loop = loops[index]
    start, stop = ex.constant_value(loop.start), ex.constant_value(loop.stop)
    assert start is not None and stop is not None and (stop - start) % factor == 0
    value = ex.Var(outer) * factor + ex.Var(inner) + start
    new_call = replace(
        call,
        a=_substitute(call.a, var, value),
        b=_substitute(call.b, var, value),
        c=_substitute(call.c, var, value),
    )
    split = [
        For(outer, ex.Const(0), ex.Const((stop - start) // factor), 1, new_call),
        For(inner, ex.Const(0), ex.Const(factor), 1, new_call),
    ]
    return replace(module, body=_rebuild([*loops[:index], *split, *loops[index + 1 :]], new_call))


def _substitute(access: Access, var: str, value: ex.Expr) -> Access:
    return replace(access, starts=tuple(ex.substitute(s, {var: value}) for s in access.starts))


def reorder(module: Module, order: tuple[str, ...]) -> Module:
    """Permute the loops of the nest into `order` (outermost first). Legal for any order here: the
    loops are rectangular and the only dependence is the commutative accumulation into C."""
    loops, call = loop_nest(module.body)
    by_name = {loop.var: loop for loop in loops}
    return replace(module, body=_rebuild([by_name[name] for name in order], call))


def vectorize(module: Module, dim: str) -> Module:
    """Choose the free dimension the primitive vectorizes."""
    loops, call = loop_nest(module.body)
    return replace(module, body=_rebuild(loops, replace(call, vectorize=dim)))


def loop_order(module: Module) -> tuple[str, ...]:
    return tuple(loop.var for loop in loop_nest(module.body)[0])
