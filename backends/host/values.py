"""What the host's code generator and its primitive lowerings share: LLVM types, integer constants and
where an array lives (`Storage`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llvmlite import ir

from swauto.errors import CodegenError

from . import layout as layouts

F32 = ir.FloatType()
I64 = ir.IntType(64)
Env = Mapping[str, ir.Value]


@dataclass(frozen=True)
class Storage:
    """An array the kernel can address: a tensor argument, a buffer in the workspace, or a buffer that
    is a view of a tensor, whose element 0 is wherever its last get pointed it. The pointer is kept in
    a stack slot (which LLVM promotes to a register) and mirrored in the workspace (`home`), which
    outlives the function: every function starts from the pointer an earlier phase left there."""

    name: str
    shape: tuple[int, ...]
    layout: layouts.Layout
    base: ir.Value  # float* to element 0 (float** to the slot holding it, for a view)
    view_of: str | None = None  # the tensor a view shows
    home: ir.Value | None = None  # a view's float** slot in the workspace
    # A clipped view (`Plan.clipped`): the axes its box may leave its tensor along, and the i64* slot in
    # the workspace where its gets record the box's first index along each axis.
    clipped: tuple[int, ...] = ()
    starts: ir.Value | None = None


def call_function(builder: ir.IRBuilder, name: str, operands: list[ir.Value]) -> ir.Value:
    """A call of the function `name` (an LLVM intrinsic such as `llvm.fma.v16f32`, or a C library function)
    whose operands and result all have the first operand's type, declared in the module on first use."""
    kind = operands[0].type
    module = builder.module
    function = module.globals.get(name) or ir.Function(module, ir.FunctionType(kind, [kind] * len(operands)), name)
    return builder.call(function, operands)


def i64(value: int) -> ir.Constant:
    """An i64 constant; `CodegenError` when `value` does not fit."""
    if not -(2**63) <= value < 2**63:
        raise CodegenError(f"the integer {value} does not fit in 64 bits")
    return ir.Constant(I64, value)


