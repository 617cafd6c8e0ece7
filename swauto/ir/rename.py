"""Renaming local buffers and transfer replies throughout an IR."""

from __future__ import annotations

from dataclasses import replace

from swauto.ir.nodes import Access, Alloc, Call, Dma, DmaWait, Module, Stmt, Zero
from swauto.ir.visitor import Rewriter


class _Rename(Rewriter):
    def __init__(self, prefix: str, buffers: set[str]) -> None:
        self.prefix, self.buffers = prefix, buffers

    def access(self, access: Access) -> Access:
        return replace(access, name=self.prefix + access.name) if access.name in self.buffers else access

    def rewrite_Alloc(self, stmt: Alloc) -> Stmt:
        return Alloc(self.prefix + stmt.buffer)

    def rewrite_Dma(self, stmt: Dma) -> Stmt:
        return replace(stmt, buffer=self.access(stmt.buffer), reply=self.prefix + stmt.reply)

    def rewrite_DmaWait(self, stmt: DmaWait) -> Stmt:
        return DmaWait(self.prefix + stmt.reply)

    def rewrite_Zero(self, stmt: Zero) -> Stmt:
        return Zero(self.access(stmt.buffer))

    def rewrite_Call(self, stmt: Call) -> Stmt:
        return stmt.with_operands(lambda _, access: self.access(access))


def prefix_buffers(module: Module, prefix: str, statement: int) -> Module:
    """`module` with every local buffer and reply name prefixed by `prefix` and its buffers marked
    as used by compute statement `statement`."""
    names = {buffer.name for buffer in module.buffers}
    buffers = tuple(replace(b, name=prefix + b.name, statement=statement,
                            copy_of=None if b.copy_of is None else prefix + b.copy_of) for b in module.buffers)
    return replace(module, buffers=buffers, body=_Rename(prefix, names).rewrite(module.body))
