"""Lowering of a final IR `Module` to LLVM IR (llvmlite.ir) for the host CPU.

The generated module defines one function, `function_name(module)`, returning void and taking one
`noalias float*` per tensor in `module.tensors` order. Each float32 local buffer becomes a zeroed,
64-byte-aligned internal global array; a DMA is a row-by-row copy between a tensor box and a buffer
box, and the GEMM primitive a triple loop with the vectorized dimension innermost. Integer
expressions are i64; `/` and `%` keep Python's floor semantics.

The module carries no target triple or data layout: the JIT sets them for the host.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod

from llvmlite import ir

from swauto.errors import CodegenError
from swauto.ir.expr import BinOp, Const, Expr, Var
from swauto.ir.nodes import (
    Access,
    Alloc,
    Compare,
    Dma,
    DmaWait,
    For,
    Gemm,
    If,
    Let,
    LocalBuffer,
    Module,
    Seq,
    Stmt,
)
from swauto.ir.printer import format_access
from swauto.primitives import GEMM

F32 = ir.FloatType()
I64 = ir.IntType(64)

# `contract` lets LLVM fuse each fmul/fadd pair of the GEMM into an FMA, and nothing more: the sum
# order stays the one written, so results do not depend on the vectorizer's choices.
_FP_FLAGS = ("contract",)
# Index arithmetic never overflows i64 for tensors that fit in memory; saying so helps SCEV and the
# vectorizer reason about addresses.
_NSW = ("nsw",)

_COMPARISONS = ("<", "<=", "==", "!=", ">", ">=")

Env = Mapping[str, ir.Value]


def function_name(module: Module) -> str:
    """The symbol of the kernel function `generate(module)` defines (a plain C identifier)."""
    return "swauto_" + re.sub(r"\W", "_", module.name)


def is_ignored_buffer(buffer: LocalBuffer) -> bool:
    """True for the float64 `*_double` buffers, which only model the SW26010's double-precision
    copies: no statement reads or writes them, so the host allocates nothing for them."""
    return buffer.dtype == "float64" and buffer.name.endswith("_double")


def generate(module: Module) -> ir.Module:
    """LLVM IR for `module` (see the module docstring for its interface).

    Raises `CodegenError` for IR the host cannot run: non-float32 data, unknown or unbound names,
    accesses whose rank or extents disagree with their tensor, buffer or primitive.
    """
    return _Lowering(module).run()


@dataclass(frozen=True)
class _Storage:
    """A row-major float32 array the kernel can address: a tensor argument or a buffer global."""

    name: str
    shape: tuple[int, ...]
    base: ir.Value  # float* to element 0

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides in elements."""
        return tuple(prod(self.shape[axis + 1:]) for axis in range(len(self.shape)))


class _Lowering:
    """One use: `run()` builds the LLVM module of one IR module."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.ir_module = ir.Module(name=module.name)
        self.storage: dict[str, _Storage] = {}
        self.ignored_buffers: set[str] = set()
        self.buffer_names = {buffer.name for buffer in module.buffers}
        self._unroll_disable: ir.MDValue | None = None
        self._check_dtypes()
        arguments = ir.FunctionType(ir.VoidType(), [F32.as_pointer() for _ in module.tensors])
        self.function = ir.Function(self.ir_module, arguments, function_name(module))
        self.function.attributes.add("nounwind")
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))

    # --- module level -----------------------------------------------------------------------------

    def run(self) -> ir.Module:
        for tensor, argument in zip(self.module.tensors, self.function.args, strict=True):
            argument.name = tensor.name
            argument.add_attribute("noalias")
            self._add_storage(_Storage(tensor.name, tensor.shape, argument))
        for buffer in self.module.buffers:
            if is_ignored_buffer(buffer):
                self.ignored_buffers.add(buffer.name)
            else:
                self._add_storage(_Storage(buffer.name, buffer.shape, self._global_array(buffer)))
        self.stmt(self.module.body, {})
        self.builder.ret_void()
        return self.ir_module

    def _check_dtypes(self) -> None:
        for tensor in self.module.tensors:
            if tensor.dtype != "float32":
                raise CodegenError(
                    f"tensor {tensor.name} has dtype {tensor.dtype}; the host backend supports float32 only"
                )
        for buffer in self.module.buffers:
            if buffer.dtype != "float32" and not is_ignored_buffer(buffer):
                raise CodegenError(
                    f"local buffer {buffer.name} has dtype {buffer.dtype}; "
                    "the host backend supports float32 buffers only"
                )

    def _add_storage(self, storage: _Storage) -> None:
        if storage.name in self.storage:
            raise CodegenError(f"the name {storage.name} is declared twice in module {self.module.name}")
        self.storage[storage.name] = storage

    def _global_array(self, buffer: LocalBuffer) -> ir.Value:
        """A zeroed, 64-byte-aligned internal global holding `buffer`; returns a float* to it."""
        array = ir.ArrayType(F32, prod(buffer.shape))
        variable = ir.GlobalVariable(self.ir_module, array, f"local.{buffer.name}")
        variable.linkage = "internal"
        variable.initializer = ir.Constant(array, None)
        variable.align = 64
        return self.builder.gep(variable, [_i64(0), _i64(0)], inbounds=True, name=buffer.name)

    # --- statements -------------------------------------------------------------------------------

    def stmt(self, stmt: Stmt, env: Env) -> None:
        """Emit `stmt` at the builder's position; afterwards the builder is where control continues."""
        if isinstance(stmt, Seq):
            self._seq(stmt, env)
        elif isinstance(stmt, For):
            self._for(stmt, env)
        elif isinstance(stmt, If):
            self._if(stmt, env)
        elif isinstance(stmt, Let):
            pass  # nothing after it in a Seq can see it: the value is dead
        elif isinstance(stmt, Alloc):
            self._alloc(stmt)
        elif isinstance(stmt, Dma):
            self._dma(stmt, env)
        elif isinstance(stmt, DmaWait):
            pass  # host copies are synchronous
        elif isinstance(stmt, Gemm):
            self._gemm(stmt, env)
        else:
            raise CodegenError(f"the host backend cannot lower the statement {stmt!r}")

    def _seq(self, stmt: Seq, env: Env) -> None:
        scope = dict(env)
        for child in stmt.stmts:
            if isinstance(child, Let):
                scope[child.var] = self.expr(child.value, scope)
            else:
                self.stmt(child, scope)

    def _for(self, stmt: For, env: Env) -> None:
        if stmt.stride == 0:
            raise CodegenError(f"loop {stmt.var} has stride 0 and would never end")
        start, stop = self.expr(stmt.start, env), self.expr(stmt.stop, env)
        # Tile loops stay rolled: their bodies are whole DMA and GEMM nests, so unrolling them
        # multiplies compile time and gains nothing.
        self.loop(start, stop, stmt.stride, stmt.var,
                  lambda index: self.stmt(stmt.body, {**env, stmt.var: index}), unroll=False)

    def _if(self, stmt: If, env: Env) -> None:
        condition = self.compare(stmt.cond, env)
        if stmt.otherwise is None:
            with self.builder.if_then(condition):
                self.stmt(stmt.then, env)
        else:
            with self.builder.if_else(condition) as (then, otherwise):
                with then:
                    self.stmt(stmt.then, env)
                with otherwise:
                    self.stmt(stmt.otherwise, env)

    def _alloc(self, stmt: Alloc) -> None:
        if stmt.buffer not in self.buffer_names:
            raise CodegenError(
                f"alloc of {stmt.buffer}, which is not a local buffer of module {self.module.name}"
            )

    # --- DMA --------------------------------------------------------------------------------------

    def _dma(self, stmt: Dma, env: Env) -> None:
        """Copy the tensor box to the buffer box ('get') or back ('put'), one row per innermost loop.

        The k-th axis of the tensor box that carries a dimension pairs with the k-th such axis of the
        buffer box; the loops run over those pairs in order, so the innermost is the last, contiguous
        axis of both when the boxes have one."""
        if stmt.direction not in ("get", "put"):
            raise CodegenError(f"DMA direction {stmt.direction!r} is neither 'get' nor 'put'")
        tensor, buffer = self._access_storage(stmt.tensor), self._access_storage(stmt.buffer)
        tensor_axes, buffer_axes = _moving_axes(stmt.tensor), _moving_axes(stmt.buffer)
        extents = [stmt.tensor.extents[axis] for axis in tensor_axes]
        if extents != [stmt.buffer.extents[axis] for axis in buffer_axes]:
            raise CodegenError(
                f"DMA between {_box(stmt.tensor)} and {_box(stmt.buffer)}: the boxes have different shapes"
            )
        tensor_base = self._box_origin(tensor, stmt.tensor, env)
        buffer_base = self._box_origin(buffer, stmt.buffer, env)

        def copy(indices: list[ir.Value]) -> None:
            at_tensor = self._element(tensor, tensor_base, zip(tensor_axes, indices, strict=True))
            at_buffer = self._element(buffer, buffer_base, zip(buffer_axes, indices, strict=True))
            source, target = (at_tensor, at_buffer) if stmt.direction == "get" else (at_buffer, at_tensor)
            self.builder.store(self.builder.load(source), target)

        # Rolled: each row becomes one memcpy, which codegen expands inline; unrolling the rows made
        # kernels compile 2-3 times slower and run no faster.
        self.nest(extents, f"{stmt.direction}.{stmt.tensor.name}", copy, unroll=[False] * len(extents))

    # --- GEMM -------------------------------------------------------------------------------------

    def _gemm(self, stmt: Gemm, env: Env) -> None:
        """`C[i, j] += sum_p A[i, p] * B[p, j]`, loops (other free dim) > K > (vectorized dim).

        Each operand's element address comes from the dimensions its axes carry, so any layout of
        A, B and C (e.g. A stored as [K, M]) works; the innermost loop is contiguous when the
        vectorized dimension is the last axis of the operands that carry it."""
        sizes = {"M": stmt.m, "N": stmt.n, "K": stmt.k}
        operands = {name: self._gemm_operand(stmt, name, access, sizes) for name, access in stmt.operands}
        bases = {name: self._box_origin(storage, access, env) for name, (storage, access) in operands.items()}
        inner = stmt.vectorize or self._default_vectorize(operands["C"][1])
        if inner not in ("M", "N"):
            raise CodegenError(f"gemm vectorizes {inner!r}; it must be 'M' or 'N'")
        outer = "N" if inner == "M" else "M"

        def element(name: str, index: Mapping[str, ir.Value]) -> ir.Value:
            storage, access = operands[name]
            moving = ((axis, index[dim]) for axis, dim in enumerate(access.dims) if dim is not None)
            return self._element(storage, bases[name], moving)

        def update(index: Mapping[str, ir.Value]) -> None:
            a = self.builder.load(element("A", index))
            b = self.builder.load(element("B", index))
            c_address = element("C", index)
            product = self.builder.fmul(a, b, flags=_FP_FLAGS)
            total = self.builder.fadd(self.builder.load(c_address), product, flags=_FP_FLAGS)
            self.builder.store(total, c_address)

        order = (outer, "K", inner)
        # Unrolling the innermost loop into straight vector code doubles its speed; unrolling the
        # other two only costs compile time.
        self.nest([sizes[dim] for dim in order], "gemm",
                  lambda indices: update(dict(zip(order, indices, strict=True))), unroll=(False, False, True))

    def _gemm_operand(
        self, stmt: Gemm, name: str, access: Access, sizes: Mapping[str, int]
    ) -> tuple[_Storage, Access]:
        """The storage of operand `name`, after checking its box carries exactly the dimensions the
        primitive expects, each once, with the primitive's size."""
        storage = self._access_storage(access)
        carried = [dim for dim in access.dims if dim is not None]
        if sorted(carried) != sorted(GEMM.operand_dims(name)):
            raise CodegenError(
                f"gemm operand {name}={_box(access)} carries dimensions {carried}; "
                f"it must carry {' and '.join(GEMM.operand_dims(name))} once each"
            )
        for extent, dim in zip(access.extents, access.dims, strict=True):
            if dim is not None and extent != sizes[dim]:
                raise CodegenError(
                    f"gemm operand {name}={_box(access)} spans {extent} along {dim}, "
                    f"but the primitive's {dim} is {sizes[dim]}"
                )
        return storage, access

    @staticmethod
    def _default_vectorize(c: Access) -> str:
        """For a gemm whose vectorized dimension is not chosen: the one C stores contiguously."""
        last = [dim for dim in c.dims if dim is not None][-1]
        return last if last in ("M", "N") else "N"

    # --- addresses --------------------------------------------------------------------------------

    def _access_storage(self, access: Access) -> _Storage:
        """The storage `access` reads or writes, after checking its rank."""
        if access.name in self.ignored_buffers:
            raise CodegenError(f"{access.name} is a float64 buffer, which the host backend does not allocate")
        storage = self.storage.get(access.name)
        if storage is None:
            raise CodegenError(
                f"{access.name} is neither a tensor nor a local buffer of module {self.module.name}"
            )
        rank = len(storage.shape)
        if not len(access.starts) == len(access.extents) == len(access.dims) == rank:
            raise CodegenError(f"the access {_box(access)} does not have one start, extent and dim per axis "
                               f"of {access.name}, which has rank {rank}")
        # Boxes at constant places are checked here; the others the scheduler's passes guarantee.
        for start, extent, dim, size in zip(access.starts, access.extents, access.dims, storage.shape,
                                            strict=True):
            span = extent if dim is not None else 1
            if isinstance(start, Const) and not (0 <= start.value and start.value + span <= size):
                raise CodegenError(
                    f"the access {_box(access)} leaves {access.name}, of shape {storage.shape}"
                )
        return storage

    def _box_origin(self, storage: _Storage, access: Access, env: Env) -> ir.Value:
        """Offset (in elements) of the first element of the box: sum of start * stride over axes."""
        offset: ir.Value = _i64(0)
        for start, stride in zip(access.starts, storage.strides, strict=True):
            term = self.builder.mul(self.expr(start, env), _i64(stride), flags=_NSW)
            offset = self.builder.add(offset, term, flags=_NSW)
        return offset

    def _element(self, storage: _Storage, origin: ir.Value, moving: Iterable[tuple[int, ir.Value]]) -> ir.Value:
        """Address of the element `origin + sum(index * stride[axis])` over (axis, index) in `moving`."""
        offset = origin
        for axis, index in moving:
            step = self.builder.mul(index, _i64(storage.strides[axis]), flags=_NSW)
            offset = self.builder.add(offset, step, flags=_NSW)
        return self.builder.gep(storage.base, [offset], inbounds=True)

    # --- control flow -----------------------------------------------------------------------------

    def loop(self, start: ir.Value, stop: ir.Value, step: int, name: str,
             body: Callable[[ir.Value], None], unroll: bool = True) -> None:
        """`for index = start; index < stop (> if step < 0); index += step: body(index)`, with the
        index an i64 phi, in the shape LLVM's loop passes recognise; `unroll=False` forbids LLVM
        to unroll it."""
        builder = self.builder
        header = self.function.append_basic_block(f"{name}.header")
        body_block = self.function.append_basic_block(f"{name}.body")
        exit_block = self.function.append_basic_block(f"{name}.exit")
        entry = builder.block
        builder.branch(header)
        builder.position_at_end(header)
        index = builder.phi(I64, name)
        index.add_incoming(start, entry)
        builder.cbranch(builder.icmp_signed("<" if step > 0 else ">", index, stop), body_block, exit_block)
        builder.position_at_end(body_block)
        body(index)
        index.add_incoming(builder.add(index, _i64(step), flags=_NSW), builder.block)
        latch = builder.branch(header)
        if not unroll:
            latch.set_metadata("llvm.loop", self._no_unroll_id())
        builder.position_at_end(exit_block)

    def _no_unroll_id(self) -> ir.MDValue:
        """A new loop ID (each loop needs its own) saying `llvm.loop.unroll.disable`."""
        if self._unroll_disable is None:
            disable = ir.MetaDataString(self.ir_module, "llvm.loop.unroll.disable")
            self._unroll_disable = self.ir_module.add_metadata([disable])
        return _LoopID(self.ir_module, self._unroll_disable)

    def nest(self, extents: list[int], name: str, body: Callable[[list[ir.Value]], None],
             unroll: Sequence[bool] | None = None) -> None:
        """Loops from 0 to each extent, the first outermost; `body` gets the indices in that order.
        `unroll[d]` False forbids unrolling loop d (all may be unrolled by default)."""

        def level(depth: int, indices: list[ir.Value]) -> None:
            if depth == len(extents):
                body(indices)
            else:
                self.loop(_i64(0), _i64(extents[depth]), 1, f"{name}.{depth}",
                          lambda index: level(depth + 1, [*indices, index]),
                          unroll=True if unroll is None else unroll[depth])

        level(0, [])

    # --- expressions ------------------------------------------------------------------------------

    def compare(self, cond: Compare, env: Env) -> ir.Value:
        """The i1 value of `cond` (signed comparison)."""
        if cond.op not in _COMPARISONS:
            raise CodegenError(f"unknown comparison {cond.op!r}")
        return self.builder.icmp_signed(cond.op, self.expr(cond.left, env), self.expr(cond.right, env))

    def expr(self, expr: Expr, env: Env) -> ir.Value:
        """The i64 value of `expr`, with Python's floor semantics for `/` and `%`."""
        if isinstance(expr, Const):
            return _i64(expr.value)
        if isinstance(expr, Var):
            if expr.name not in env:
                raise CodegenError(f"the variable {expr.name} is used where no loop or let defines it")
            return env[expr.name]
        if isinstance(expr, BinOp):
            return self._binop(expr, env)
        raise CodegenError(f"the host backend cannot lower the expression {expr!r}")

    def _binop(self, expr: BinOp, env: Env) -> ir.Value:
        left, right = self.expr(expr.left, env), self.expr(expr.right, env)
        builder = self.builder
        if expr.op == "+":
            return builder.add(left, right, flags=_NSW)
        if expr.op == "-":
            return builder.sub(left, right, flags=_NSW)
        if expr.op == "*":
            return builder.mul(left, right, flags=_NSW)
        if expr.op in ("min", "max"):
            pick_left = builder.icmp_signed("<" if expr.op == "min" else ">", left, right)
            return builder.select(pick_left, left, right)
        if expr.op in ("/", "%"):
            if isinstance(expr.right, Const) and expr.right.value == 0:
                raise CodegenError(f"division by zero in {expr}")
            return self._floor_divmod(left, right, expr.op)
        raise CodegenError(f"unknown operator {expr.op!r} in {expr}")

    def _floor_divmod(self, left: ir.Value, right: ir.Value, op: str) -> ir.Value:
        """Python's `left // right` or `left % right`: LLVM's sdiv/srem truncate toward zero, so
        when the remainder is non-zero and its sign differs from the divisor's, step one down."""
        builder = self.builder
        quotient, remainder = builder.sdiv(left, right), builder.srem(left, right)
        signs_differ = builder.icmp_signed("<", builder.xor(remainder, right), _i64(0))
        adjust = builder.and_(builder.icmp_signed("!=", remainder, _i64(0)), signs_differ)
        if op == "/":
            return builder.sub(quotient, builder.zext(adjust, I64))
        return builder.select(adjust, builder.add(remainder, right), remainder)


class _LoopID(ir.MDValue):
    """A loop ID: a distinct metadata node whose first operand is itself, as LLVM requires, then
    the loop's properties. (llvmlite's uniqued `add_metadata` cannot build a self-reference.)"""

    def __init__(self, module: ir.Module, *properties: ir.MDValue) -> None:
        super().__init__(module, (), name=str(len(module.metadata)))
        self.operands = (self, *properties)

    def descr(self, buf: list[str]) -> None:
        buf.append("distinct ")
        super().descr(buf)

    # Identity, not structure: the operands contain the node itself.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def _moving_axes(access: Access) -> list[int]:
    """The axes of `access` that carry a dimension (the others hold a single index)."""
    return [axis for axis, dim in enumerate(access.dims) if dim is not None]


def _box(access: Access) -> str:
    return format_access(access)


def _i64(value: int) -> ir.Constant:
    if not -(2**63) <= value < 2**63:
        raise CodegenError(f"the integer {value} does not fit in 64 bits")
    return ir.Constant(I64, value)
