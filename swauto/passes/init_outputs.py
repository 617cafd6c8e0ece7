"""Overwritten outputs: a statement that overwrites its output starts every tile it writes from the
identity of its primitive's combine (0 for a sum or a GEMM, -inf for a maximum).

Guarantees: every nest whose call has `overwrite` set and whose primitive combines into its output
is preceded by a nest that fills each output tile the call writes with that identity: the same
loops that index the output, in the same order, around a `fill` of the same box. Afterwards no call
has `overwrite` set, and every other statement is unchanged. A primitive that stores its result
(a map) overwrites by itself: its flag is only cleared. Tiles are written exactly as the call
writes them, so the fill covers what the statement overwrites and nothing else.
"""

from __future__ import annotations

from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.nests import loop_nest, statements
from swauto.ir.nodes import Call, For, Module, Stmt, seq
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


def init_outputs(module: Module) -> Module:
    nests: list[Stmt] = []
    changed = False
    for nest in statements(module):
        loops, call = loop_nest(nest)
        if not call.overwrite:
            nests.append(nest)
            continue
        changed = True
        if call.signature.combine:
            nests.append(_fill(loops, call))
        body: Stmt = replace(call, overwrite=False)
        for loop in reversed(loops):
            body = For(loop.var, loop.start, loop.stop, loop.stride, body)
        nests.append(body)
    return replace(module, body=seq(*nests)) if changed else module
