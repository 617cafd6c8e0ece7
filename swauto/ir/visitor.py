"""Walking the IR: `Visitor` looks at every statement, `Rewriter` rebuilds the tree bottom-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from swauto.ir.nodes import For, If, Seq, Stmt


def children(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside `stmt`, in execution order."""
    if isinstance(stmt, For):
        return (stmt.body,)
    if isinstance(stmt, Seq):
        return stmt.stmts
    if isinstance(stmt, If):
        return (stmt.then,) if stmt.otherwise is None else (stmt.then, stmt.otherwise)
    return ()


class Visitor:
    """The one way statements are interpreted: `visit(stmt, *args)` calls `visit_<NodeClass>(stmt, *args)`
    and returns its result, or `generic_visit`, which visits the children in order. The reference
    interpreter, both simulators, the printers, the verifier and the host's code generator are
    visitors; a `visit_For` that wants the loop's body visited calls `self.visit(stmt.body, ...)`.
    (The SW26010 model walks the IR in one flat loop of its own instead: it prices a candidate in
    about 30 µs, and a call per statement would double that.)"""

    _methods: dict[type, Callable[..., Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._methods = {}  # node class -> method, filled on first use

    def visit(self, stmt: Stmt, *args: Any) -> Any:
        kind = type(stmt)
        method = self._methods.get(kind)
        if method is None:
            method = self._methods[kind] = getattr(type(self), f"visit_{kind.__name__}", type(self).generic_visit)
        return method(self, stmt, *args)

    def generic_visit(self, stmt: Stmt, *args: Any) -> Any:
        for child in children(stmt):
            self.visit(child, *args)
        return None


class Rewriter:
    """Returns a new tree: `rewrite_<NodeClass>(node)` where defined, else the node with its children
    rewritten. A `rewrite_X` method calls `self.generic_rewrite(node)` to rewrite the children first."""

    def rewrite(self, stmt: Stmt) -> Stmt:
        method = getattr(self, f"rewrite_{type(stmt).__name__}", None)
        return method(stmt) if method is not None else self.generic_rewrite(stmt)

    def generic_rewrite(self, stmt: Stmt) -> Stmt:
        if isinstance(stmt, For):
            body = self.rewrite(stmt.body)
            return stmt if body is stmt.body else For(stmt.var, stmt.start, stmt.stop, stmt.stride, body)
        if isinstance(stmt, Seq):
            from swauto.ir.nodes import seq

            return seq(*(self.rewrite(child) for child in stmt.stmts))
        if isinstance(stmt, If):
            then = self.rewrite(stmt.then)
            otherwise = None if stmt.otherwise is None else self.rewrite(stmt.otherwise)
            return If(stmt.cond, then, otherwise)
        return stmt


def walk(stmt: Stmt):
    """Every statement in `stmt`, pre-order, with the list of enclosing `For` loops (outermost first)."""

    def go(node: Stmt, loops: tuple[For, ...]):
        yield node, loops
        inner = loops + (node,) if isinstance(node, For) else loops
        for child in children(node):
            yield from go(child, inner)

    yield from go(stmt, ())
