"""The host's lowering of each primitive family: the GEMM's micro-kernel (`microkernel`), and maps and
reductions as loops over their tile, N innermost, that LLVM vectorizes where the lanes are contiguous.

A map's or reduction's scalar function (`swauto.primitives.elementwise`) is built from LLVM float
operations and the `llvm.exp` intrinsic; `tanh` calls the C library's `tanhf`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from swauto.errors import CodegenError
from swauto.ir.nodes import Call
from swauto.primitives.elementwise import Scalar

from .layout import innermost_dim
from .microkernel import OperandMap, check_operand, emit_gemm, operand_map, table_lookup
from .values import F32, Env, i64

if TYPE_CHECKING:
    from .codegen import Lowering

_NSW = ("nsw",)


def emit_call(lw: Lowering, call: Call, env: Env) -> None:
    """Emit `call` at the builder's position, by its primitive's family."""
    kind = call.signature.kind
    if kind == "gemm":
        emit_gemm(lw, call, env)
    elif kind in ("map", "reduce"):
        emit_map(lw, call, env)
    elif kind == "transform":
        emit_transform(lw, call, env)
    else:
        raise CodegenError(f"the host backend cannot lower primitives of the family {kind!r} ({call.primitive})")


def emit_map(lw: Lowering, call: Call, env: Env) -> None:
    """`Z = f(X, Y, c)` (or `Z += f(X, Y, c)` for a map that combines) at every point of the tile, or for
    a reduction `Z = Z ⊕ X` (Z's offset does not move along the dimensions it does not carry, so the
    points there fold into one element)."""
    sizes = {dim: int(value) for dim, value in call.sizes}
    if min(sizes.values(), default=1) < 1:
        raise CodegenError(f"{call.primitive} sizes must be positive, got {dict(call.sizes)}")
    for role, access in call.operands:
        check_operand(call, role, access, sizes)
    signature = call.signature
    maps = {role: operand_map(lw, access, sizes, env) for role, access in call.operands}
    function: Scalar = signature.cost["function"]  # type: ignore[index,assignment]
    dims = signature.dims
    builder = lw.builder

    def point(index: dict[str, ir.Value]) -> None:
        pointers = {role: _element(lw, operand, index, f"{call.primitive}.{role}") for role, operand in maps.items()}
        if signature.kind == "reduce":
            values = {"x": builder.load(pointers["Z"], align=4), "y": builder.load(pointers["X"], align=4)}
        else:
            values = {name: builder.load(pointers[role], align=4) for name, role in (("x", "X"), ("y", "Y"))
                      if role in pointers}
        value = _scalar(lw, function, values, call.constant)
        if signature.kind == "map" and signature.combine == "+":  # Z += f(X, Y)
            value = builder.fadd(builder.load(pointers["Z"], align=4), value)
        builder.store(value, pointers["Z"], align=4)

    def level(depth: int, index: dict[str, ir.Value]) -> None:
        if depth == len(dims):
            point(index)
            return
        dim, size = dims[depth], sizes.get(dim := dims[depth], 1)
        # The innermost loop may be unrolled only when shorter than a vector: unrolled whole, a long
        # one leaves LLVM to vectorize the loop around it instead, with gathers (a depthwise conv's
        # [56 x 32] plane, 32 channels innermost: 7.0 ms, 10x the loop vectorized along its lanes).
        lw.loop(i64(0), i64(size), 1, f"{call.primitive}.{dim}", lambda i: level(depth + 1, {**index, dim: i}),
                unroll=depth == len(dims) - 1 and size < lw.isa.width)

    level(0, {})


def contiguous_lanes(call: Call) -> bool:
    """Whether `emit_map`'s innermost loop longer than 1 steps every operand that moves along it one
    element at a time: its dimension is carried by one axis of the operand, the innermost longer than 1,
    with no step. Then LLVM vectorizes the loop with plain vector loads; otherwise each lane is
    loaded and computed alone (a depthwise conv's channels with the batch innermost in memory)."""
    sizes = {dim: int(value) for dim, value in call.sizes}
    lanes = next((dim for dim in reversed(call.signature.dims) if sizes.get(dim, 1) > 1), None)
    for _, access in call.operands:
        steps = access.steps or (1,) * len(access.dims)
        axes = [(extent, step) for dim, extent, step in zip(access.dims, access.padded_extents(), steps, strict=True)
                if dim == lanes and extent > 1]
        if axes and (len(axes) > 1 or axes[0][1] != 1 or innermost_dim(access) != lanes):
            return False
    return True


def emit_transform(lw: Lowering, call: Call, env: Env) -> None:
    """`Z = T X` with T the primitive's constant matrix: loops over M and N, each point's J inputs
    loaded once, and each of the I outputs a sum of their nonzero multiples (no multiply for 1 or -1)."""
    sizes = {dim: int(value) for dim, value in call.sizes}
    for role, access in call.operands:
        check_operand(call, role, access, sizes)
    matrix = call.signature.cost["matrix"]  # type: ignore[index]
    maps = {role: operand_map(lw, access, sizes, env) for role, access in call.operands}
    builder = lw.builder

    def pointer(role: str, index: dict[str, ir.Value]) -> ir.Value:
        return _element(lw, maps[role], index, f"{call.primitive}.{role}")

    def point(m: ir.Value, n: ir.Value) -> None:
        x = [builder.load(pointer("X", {"J": i64(j), "M": m, "N": n}), align=4) for j in range(sizes["J"])]
        for i, row in enumerate(matrix):
            total: ir.Value | None = None
            for j, coefficient in enumerate(row):
                if coefficient == 0:
                    continue
                term = x[j] if abs(coefficient) == 1 else builder.fmul(x[j], ir.Constant(F32, float(abs(coefficient))))
                if total is None:
                    total = term if coefficient > 0 else builder.fneg(term)
                else:
                    total = builder.fadd(total, term) if coefficient > 0 else builder.fsub(total, term)
            builder.store(total if total is not None else ir.Constant(F32, 0.0),
                          pointer("Z", {"I": i64(i), "M": m, "N": n}), align=4)

    lw.loop(i64(0), i64(sizes.get("M", 1)), 1, f"{call.primitive}.M",
            lambda m: lw.loop(i64(0), i64(sizes.get("N", 1)), 1, f"{call.primitive}.N", lambda n: point(m, n)))


def _element(lw: Lowering, operand: OperandMap, index: dict[str, ir.Value], name: str) -> ir.Value:
    """A pointer to the operand's element at `index` (a value per dimension it carries)."""
    offset = operand.base
    for dim, table in operand.tables.items():
        offset = lw.builder.add(offset, table_lookup(lw, table, index[dim], f"{name}.{dim}"), flags=_NSW)
    return lw.builder.gep(operand.storage.base, [offset], inbounds=True)


def _scalar(lw: Lowering, scalar: Scalar, values: dict[str, ir.Value], constant: float | None) -> ir.Value:
    """The float value of `scalar` (see `swauto.primitives.elementwise`)."""
    builder = lw.builder
    if isinstance(scalar, str):
        if scalar == "c":
            return ir.Constant(F32, float(constant or 0.0))
        return values[scalar]
    if isinstance(scalar, float | int):
        return ir.Constant(F32, float(scalar))
    op, *args = scalar
    operands = [_scalar(lw, arg, values, constant) for arg in args]
    if op == "add":
        return builder.fadd(*operands)
    if op == "sub":
        return builder.fsub(*operands)
    if op == "mul":
        return builder.fmul(*operands)
    if op == "div":
        return builder.fdiv(*operands)
    if op == "neg":
        return builder.fneg(operands[0])
    if op in ("max", "min"):
        # NaN-free data: a compare and select, which LLVM turns into vector max/min.
        left, right = operands
        return builder.select(builder.fcmp_ordered(">" if op == "max" else "<", left, right), left, right)
    if op in ("exp", "tanh"):
        name = "llvm.exp.f32" if op == "exp" else "tanhf"
        module = lw.ir_module
        function = module.globals.get(name) or ir.Function(module, ir.FunctionType(F32, [F32]), name)
        return builder.call(function, operands)
    raise CodegenError(f"the host backend cannot lower the scalar operation {op!r}")
