"""Emit the final IR as an athread-style CPE program of primitive calls (the kernel's `.code`)."""

from __future__ import annotations

from swauto.ir import expr as ex
from swauto.ir.memory import dma_pattern, walked_strides
from swauto.ir.nodes import Access, Alloc, Call, Dma, DmaWait, For, If, Let, Module, Seq, Stmt, Zero
from swauto.ir.printer import format_access
from swauto.ir.visitor import Visitor
from swauto.machine import DTYPE_BYTES, SW26010
from swauto.passes.plan_local_memory import per_cpe_bytes

C_TYPES = {"float32": "float", "float64": "double"}


def _address(access: Access, shape: tuple[int, ...]) -> str:
    """C expression of the element offset of the box's first element."""
    offset = ex.Const(0)
    for start, stride in zip(access.starts, walked_strides(shape, access.walks), strict=True):
        offset = offset + start * stride
    return str(offset)


class _Lines(Visitor):
    """The C lines of a statement at an indentation level."""

    def __init__(self, module: Module) -> None:
        self.module = module

    def visit_Seq(self, stmt: Seq, indent: int) -> list[str]:
        return [line for child in stmt.stmts for line in self.visit(child, indent)]

    def visit_For(self, stmt: For, indent: int) -> list[str]:
        pad, v = "  " * indent, stmt.var
        head = f"{pad}for (long {v} = {stmt.start}; {v} < {stmt.stop}; {v} += {stmt.stride}) {{"
        return [head, *self.visit(stmt.body, indent + 1), pad + "}"]

    def visit_If(self, stmt: If, indent: int) -> list[str]:
        pad = "  " * indent
        lines = [f"{pad}if ({stmt.cond.left} {stmt.cond.op} {stmt.cond.right}) {{", *self.visit(stmt.then, indent + 1)]
        if stmt.otherwise is not None:
            lines += [pad + "} else {", *self.visit(stmt.otherwise, indent + 1)]
        return [*lines, pad + "}"]

    def visit_Let(self, stmt: Let, indent: int) -> list[str]:
        return [f"{'  ' * indent}long {stmt.var} = {stmt.value};"]

    def visit_Alloc(self, stmt: Alloc, indent: int) -> list[str]:
        return []  # buffers are declared once, at the top of the program

    def visit_Dma(self, stmt: Dma, indent: int) -> list[str]:
        pad = "  " * indent
        tensor = self.module.tensor(stmt.tensor.name)
        size = DTYPE_BYTES[tensor.dtype]
        pattern = dma_pattern(tensor.shape, stmt.tensor.extents, stmt.tensor.steps, stmt.tensor.walks)
        stride = 0 if pattern.stride is None else pattern.stride * size
        memory = f"{tensor.name} + {_address(stmt.tensor, tensor.shape)}"
        if stmt.zero_fill:  # the CPEs clip the box to the tensor and zero what lies outside
            return [f"{pad}dma_{stmt.direction}_clipped({stmt.buffer.name}, {memory}, /* box */ "
                    f"{format_access(stmt.tensor, False)}, /* tensor */ {list(tensor.shape)}, &{stmt.reply});"]
        return [
            f"{pad}dma_{stmt.direction}({stmt.buffer.name}, {memory}, /* block */ {pattern.block * size}, "
            f"/* stride */ {stride}, /* count */ {pattern.count}, &{stmt.reply});"
        ]

    def visit_DmaWait(self, stmt: DmaWait, indent: int) -> list[str]:
        return [f"{'  ' * indent}dma_wait(&{stmt.reply}, 1);"]

    def visit_Zero(self, stmt: Zero, indent: int) -> list[str]:
        return [f"{'  ' * indent}ldm_zero({stmt.buffer.name}, /* box */ {format_access(stmt.buffer, False)});"]

    def visit_Call(self, stmt: Call, indent: int) -> list[str]:
        sizes = ", ".join(f"{dim}={size}" for dim, size in stmt.sizes)
        layouts = ", ".join(f"{name}={access.name}/{''.join(d or '_' for d in access.dims)}"
                            for name, access in stmt.operands)
        extra = f", vec={stmt.vectorize}" if stmt.signature.vectorizable else ""
        if stmt.signature.constant:
            extra += f", {stmt.signature.constant}={stmt.constant!r}"
        return [f"{'  ' * indent}{stmt.primitive}_op({sizes}, {layouts}{extra});"]

    def generic_visit(self, stmt: Stmt, indent: int) -> list[str]:
        raise TypeError(f"not a statement: {stmt!r}")


def emit_program(module: Module, machine: SW26010, title: str = "") -> str:
    """The CPE program: per-CPE buffer declarations with their LDM offsets, then the loop nest."""
    lines = [f"/* swauto SW26010 program: {module.name}{' - ' + title if title else ''} */",
             f"/* runs on one core group: {machine.mesh_rows} x {machine.mesh_columns} CPEs; "
             "every buffer below is one CPE's share of the mesh-wide tile */"]
    for buffer in module.buffers:
        elements = per_cpe_bytes(buffer, machine) // DTYPE_BYTES[buffer.dtype]
        lines.append(
            f"__thread_local {C_TYPES[buffer.dtype]} {buffer.name}[{elements}]"
            f"; /* tile {'x'.join(map(str, buffer.shape))}, LDM offset {buffer.offset} */"
        )
    arguments = ", ".join(f"{C_TYPES[t.dtype]} *{t.name}" for t in module.tensors)
    lines.append(f"void {module.name}_cpe({arguments}) {{")
    lines.extend(_Lines(module).visit(module.body, 1))
    lines.append("}")
    return "\n".join(lines) + "\n"
