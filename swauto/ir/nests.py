"""The statements of a module as loop nests: each statement of the compute block is a perfect nest of
loops around one primitive call, at the top level or inside *sequence loops* (a loop around several
statements, each iteration running them in order). Until `peel_boundaries` gives nests other shapes,
a loop whose body is a Seq is a sequence loop, and any other loop belongs to a nest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from swauto.ir import expr as ex
from swauto.ir.nodes import Call, For, Module, Seq, Stmt, seq

Nest = tuple[list[For], Call]


def is_sequence_loop(stmt: Stmt) -> bool:
    """Whether `stmt` is a loop around several statements (in a module whose statements are nests)."""
    return isinstance(stmt, For) and isinstance(stmt.body, Seq)


def statements(module: Module) -> list[Stmt]:
    """The nests of the module's compute block, in order (those inside sequence loops included)."""
    found: list[Stmt] = []

    def visit(stmt: Stmt) -> None:
        if isinstance(stmt, Seq):
            for child in stmt.stmts:
                visit(child)
        elif is_sequence_loop(stmt):
            visit(stmt.body)  # type: ignore[union-attr]
        else:
            found.append(stmt)

    visit(module.body)
    return found


def contexts(module: Module) -> list[tuple[tuple[str, int, int], ...]]:
    """Per nest, the sequence loops around it (outermost first) with their first and last values."""
    found: list[tuple[tuple[str, int, int], ...]] = []

    def visit(stmt: Stmt, around: tuple[tuple[str, int, int], ...]) -> None:
        if isinstance(stmt, Seq):
            for child in stmt.stmts:
                visit(child, around)
        elif is_sequence_loop(stmt):
            assert isinstance(stmt, For) and stmt.stride == 1
            first, stop = ex.constant_value(stmt.start), ex.constant_value(stmt.stop)
            assert first is not None and stop is not None, "a sequence loop has constant bounds"
            visit(stmt.body, (*around, (stmt.var, first, stop - 1)))
        else:
            found.append(around)

    visit(module.body, ())
    return found


def map_statements(module: Module, change: Callable[[int, Stmt], Sequence[Stmt]]) -> Module:
    """The module with nest number i replaced by the statements `change(i, nest)` (none, to remove
    it), in place: inside the same sequence loops."""
    index = 0

    def rebuild(stmt: Stmt) -> list[Stmt]:
        nonlocal index
        if isinstance(stmt, Seq):
            return [new for child in stmt.stmts for new in rebuild(child)]
        if is_sequence_loop(stmt):
            return [replace(stmt, body=Seq(tuple(rebuild(stmt.body))))]  # type: ignore[union-attr]
        index += 1
        return list(change(index - 1, stmt))

    return replace(module, body=seq(*rebuild(module.body)))


def replace_statements(module: Module, nests: Sequence[Stmt]) -> Module:
    """The module with its nests replaced by `nests`, one for one."""
    return map_statements(module, lambda index, _: [nests[index]])


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


def outermost(order: Iterable[str], loops: frozenset[str]) -> bool:
    """Whether a nest whose loops run in `order` (outermost first) runs each of `loops` outside every
    other loop."""
    inner = False
    for var in order:
        if var not in loops:
            inner = True
        elif inner:
            return False
    return True
