"""The statements of a module as loop nests: each top-level statement is a perfect nest of loops
around one primitive call (until `peel_boundaries` and the passes after it give nests other shapes)."""

from __future__ import annotations

from swauto.ir.nodes import Call, For, Module, Seq, Stmt

Nest = tuple[list[For], Call]


def statements(module: Module) -> list[Stmt]:
    """The module's top-level statements (the nests of its compute block, in order)."""
    return list(module.body.stmts) if isinstance(module.body, Seq) else [module.body]


def loop_nest(body: Stmt) -> tuple[list[For], Call]:
    """The loops of a perfect nest, outermost first, and the call at its bottom."""
    loops = []
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    if not isinstance(body, Call):
        raise ValueError("not a perfect loop nest around one primitive call")
    return loops, body


def rebuild_nest(loops: list[For], call: Call) -> Stmt:
    body: Stmt = call
    for loop in reversed(loops):
        body = For(loop.var, loop.start, loop.stop, loop.stride, body)
    return body
