"""The IR as readable pseudo-code: what `--dump-ir` shows and what golden tests compare."""

from __future__ import annotations

from swauto.ir.memory import dma_pattern
from swauto.ir.nodes import (
    Access,
    Alloc,
    Call,
    Dma,
    DmaWait,
    For,
    If,
    Let,
    Module,
    Seq,
    Stmt,
    Zero,
)
from swauto.ir.visitor import Visitor

_DTYPE_BYTES = {"float32": 4, "float64": 8}


def format_access(access: Access, with_dims: bool = True) -> str:
    axes = []
    pads = access.pad or (0,) * len(access.extents)
    for axis, (start, extent, dim, pad) in enumerate(zip(access.starts, access.extents, access.dims, pads,
                                                          strict=True)):
        text = str(start) if dim is None and extent == 1 else f"{start}:+{extent}"
        text += f":{access.step(axis)}" if access.step(axis) != 1 else ""
        text += f"@{access.walks[axis]}" if access.walks else ""  # the tensor axis it walks
        axes.append(text + (f"(+{pad} zeros)" if pad else ""))
    dims = ", ".join(d for d in access.dims if d is not None)
    return f"{access.name}[{', '.join(axes)}]" + (f" ({dims})" if dims and with_dims else "")


def _format_dma(stmt: Dma, module: Module | None) -> str:
    source, target = (stmt.tensor, stmt.buffer) if stmt.direction == "get" else (stmt.buffer, stmt.tensor)
    text = (f"dma {stmt.direction} {format_access(source, False)} -> {format_access(target, False)}"
            f"{' zero-filled' if stmt.zero_fill else ''}{' exchanged' if stmt.exchanged else ''} reply {stmt.reply}")
    if module is not None:
        tensor = module.tensor(stmt.tensor.name)
        size = _DTYPE_BYTES[tensor.dtype]
        moved = stmt.moved_box()  # an exchanged window's bounding box
        pattern = dma_pattern(tensor.shape, moved.extents, moved.steps, moved.walks)
        shape = f"{pattern.count} x {pattern.block * size} B"
        if pattern.stride is not None:
            shape += f", stride {pattern.stride * size} B"
        text += f"  # {shape}"
    return text


def format_stmt(stmt: Stmt, module: Module | None = None, indent: int = 0) -> list[str]:
    """The lines of `stmt`, indented by `indent` levels (DMA shapes shown when `module` is given)."""
    return _Printer(module).visit(stmt, indent)


class _Printer(Visitor):
    def __init__(self, module: Module | None) -> None:
        self.module = module

    def visit_For(self, stmt: For, indent: int) -> list[str]:
        step = "" if stmt.stride == 1 else f" step {stmt.stride}"
        head = f"{'  ' * indent}for {stmt.var} in {stmt.start}..{stmt.stop}{step}:"
        return [head, *self.visit(stmt.body, indent + 1)]

    def visit_Seq(self, stmt: Seq, indent: int) -> list[str]:
        return [line for child in stmt.stmts for line in self.visit(child, indent)]

    def visit_If(self, stmt: If, indent: int) -> list[str]:
        pad = "  " * indent
        lines = [f"{pad}if {stmt.cond.left} {stmt.cond.op} {stmt.cond.right}:", *self.visit(stmt.then, indent + 1)]
        if stmt.otherwise is not None:
            lines += [f"{pad}else:", *self.visit(stmt.otherwise, indent + 1)]
        return lines

    def visit_Let(self, stmt: Let, indent: int) -> list[str]:
        return [f"{'  ' * indent}{stmt.var} = {stmt.value}"]

    def visit_Alloc(self, stmt: Alloc, indent: int) -> list[str]:
        return [f"{'  ' * indent}alloc {stmt.buffer}"]

    def visit_Dma(self, stmt: Dma, indent: int) -> list[str]:
        return ["  " * indent + _format_dma(stmt, self.module)]

    def visit_DmaWait(self, stmt: DmaWait, indent: int) -> list[str]:
        return [f"{'  ' * indent}dma wait {stmt.reply}"]

    def visit_Zero(self, stmt: Zero, indent: int) -> list[str]:
        return [f"{'  ' * indent}zero {format_access(stmt.buffer, False)}"]

    def visit_Call(self, stmt: Call, indent: int) -> list[str]:
        return ["  " * indent + format_call(stmt)]

    def generic_visit(self, stmt: Stmt, indent: int) -> list[str]:
        raise TypeError(f"not a statement: {stmt!r}")


def format_module(module: Module) -> str:
    lines = [f"kernel {module.name}"]
    for tensor in module.tensors:
        notes = ["output"] if tensor.is_output else ["local"] if tensor.is_local else \
            ["constant"] if tensor.is_constant else []
        if tensor.layout:
            notes.append(f"memory order of declared axes {list(tensor.layout)}")
        comment = f"  # {'; '.join(notes)}" if notes else ""
        lines.append(f"  tensor {tensor.name}[{', '.join(map(str, tensor.shape))}] {tensor.dtype}{comment}")
    for buffer in module.buffers:
        where = "" if buffer.offset is None else f" at {buffer.offset}"
        where += f" (statement {buffer.statement})" if buffer.statement else ""
        where += " resident" if buffer.resident else ""
        where += " flat" if buffer.spread == "flat" else ""
        lines.append(f"  local {buffer.name}[{', '.join(map(str, buffer.shape))}] {buffer.dtype}{where}")
    lines.append("body:")
    lines.extend(format_stmt(module.body, module, 1))
    return "\n".join(lines) + "\n"


def format_call(call: Call) -> str:
    """`gemm(M=128, N=64, K=32, A=..., B=..., C=..., vectorize=M)`: sizes, operands, choices."""
    signature = call.signature
    parts = [f"{dim}={size}" for dim, size in call.sizes]
    parts += [f"{name}={format_access(access)}" for name, access in call.operands]
    if signature.constant:
        parts.append(f"{signature.constant}={call.constant}")
    if signature.vectorizable:
        parts.append(f"vectorize={call.vectorize or '?'}")
    if call.overwrite:
        parts.append("overwrite")
    text = f"{call.primitive}({', '.join(parts)})"
    if call.runs_if:
        text += " if " + " and ".join(f"{c.left} {c.op} {c.right}" for c in call.runs_if)
    return text + "".join(f" then {format_call(consumer)}" for consumer in call.epilogue)
