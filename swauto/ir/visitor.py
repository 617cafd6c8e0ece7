"""Walking the IR: `Visitor` looks at every statement, `Rewriter` rebuilds the tree bottom-up."""

from __future__ import annotations

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
    """Calls `visit_<NodeClass>(node)` for each statement, or `generic_visit`, which visits the children.

    A `visit_For` that wants the loop's body visited calls `self.generic_visit(node)` itself.
    """

    def visit(self, stmt: Stmt) -> None:
        getattr(self, f"visit_{type(stmt).__name__}", self.generic_visit)(stmt)

    def generic_visit(self, stmt: Stmt) -> None:
        for child in children(stmt):
            self.visit(child)


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
