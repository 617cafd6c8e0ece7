"""Lowering of a final IR `Module` to LLVM IR (llvmlite.ir) for the host CPU.

The generated module defines a function per phase (`Plan.symbols`) of each of `parallel.segments`:
its 'before' and 'loop' ('before1' and 'loop1' for the second segment, and so on), then 'after' (and,
on the native thread pool, 'parallel', which runs them all, each 'loop' on the threads: `threads`).
A kernel without a parallel group has 'before' alone; one with prepacked constant tiles has 'prepack',
which fills their arrays (`prepack`). Each takes one `noalias float*` per array of `Plan.arguments` (the
tensors in `module.tensors` order, then the prepacked arrays), a `float*` to a per-thread workspace
holding the local buffers at `Plan.offsets`, and an i64 range `lo, hi`: 'loop' runs those flattened
iterations of the parallel nest, the others ignore it. Buffers live in the layouts of `layout.plan`; a
DMA is a copy loop nest in row-major element order of its boxes (packing into micro-panels on the way),
and the GEMM primitive a register-blocked micro-kernel (`microkernel`). Integer expressions are i64;
`/` and `%` keep Python's floor semantics.

The module carries no target triple or data layout: the JIT sets them for the host.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from math import prod

from llvmlite import ir

from swauto.errors import CodegenError
from swauto.ir.expr import BinOp, Const, Expr, Var
from swauto.ir.nodes import (
    Access,
    Alloc,
    Call,
    Compare,
    Dma,
    DmaWait,
    For,
    If,
    Let,
    LocalBuffer,
    Module,
    Seq,
    Stmt,
    Zero,
)
from swauto.ir.printer import format_access
from swauto.ir.verify import VerificationError, verify
from swauto.ir.visitor import Visitor

from . import layout as layouts
from . import parallel, threads
from .isa import Isa, cache_sizes, l1_ways, l2_ways
from .knobs import Knobs
from .prepack import Prepacked, Section, prepacked
from .primitives import accumulated_taps, emit_call, emit_map, tap_values, zeroed_sum
from .values import F32, I64, Env, Storage, i64

# Index arithmetic never overflows i64 for tensors that fit in memory; saying so helps SCEV and the
# vectorizer reason about addresses.
_NSW = ("nsw",)
_COMPARISONS = ("<", "<=", "==", "!=", ">", ">=")



STARTS_OFFSET = layouts.ALIGN_ELEMENTS  # a clipped view's box starts, after its pointer in the workspace


def is_ignored_buffer(buffer: LocalBuffer) -> bool:
    """True for the float64 `*_double` buffers, which only model the SW26010's double-precision
    copies: no statement reads or writes them, so the host allocates nothing for them."""
    return buffer.copy_of is not None


@dataclass(frozen=True)
class Plan:
    """What the runtime needs besides the machine code: the segments' phases, each phase's function
    symbol (`phase`), and the per-thread workspace (buffer offsets and total size, in float32 elements)."""

    segments: tuple[parallel.Phases, ...]
    symbols: dict[str, str]
    offsets: dict[str, int]  # buffers, and for a view or a prepacked buffer the slot holding its pointer
    workspace_elements: int
    layouts: dict[str, layouts.Layout]
    views: dict[str, str]  # buffer -> the tensor it is a view of (no workspace, no copies)
    # The views whose box may leave their tensor, each with the axes it may leave along
    # (`layout.clipped_axes`): each get records the box's first index per axis in the slot after the
    # view's pointer (`STARTS_OFFSET` elements on), where the maps reading it find them.
    clipped: dict[str, tuple[int, ...]]
    prepacked: dict[str, Prepacked]  # buffers pointed at their tiles in arrays filled once (`prepack`)
    arguments: tuple[str, ...]  # the arrays every function takes a pointer to: the tensors, then the prepacked ones


def buffer_layouts(module: Module, knobs: Knobs, width: int, l3_bytes: int, l2: tuple[int, int],
                   l1: tuple[int, int] | None = None) -> tuple[dict[str, layouts.Layout], dict[str, str]]:
    """`layouts.plan` of `module` as the backend takes it (and the host model asks it): the float64
    copies left out (`is_ignored_buffer`), tiles held in place where the tensors fit half of an L3 of
    `l3_bytes` (they stay cache-resident) or, beyond it, where calibration measured tiles in place faster
    there than copies (`knobs.dram_views`), in an L2 of `l2` and an L1 of `l1` (bytes, ways)."""
    ignored = frozenset(b.name for b in module.buffers if is_ignored_buffer(b))
    return layouts.plan(module, knobs, width, ignored, in_place_allowed(module, l3_bytes, knobs.dram_views), l2,
                        l1)


def in_place_allowed(module: Module, l3_bytes: int, dram_views: bool) -> bool:
    """Whether `layouts.plan` may hold `module`'s tiles in place (as views of its tensors): where the tensors
    fit half of an L3 of `l3_bytes`, or anywhere with `dram_views`."""
    return dram_views or sum(4 * prod(tensor.shape) for tensor in module.tensors) <= l3_bytes // 2


def plan_kernel(module: Module, isa: Isa, knobs: Knobs) -> Plan:
    """The plan of `module` for `isa` and `knobs` (deterministic: the same for equal arguments).

    Raises `CodegenError` for non-float32 data, and for IR the verifier refuses (a bug in swauto).
    """
    _check_dtypes(module)
    l1_bytes, l2_bytes, l3_bytes = cache_sizes()
    placed, views = buffer_layouts(module, knobs, isa.width, l3_bytes, (l2_bytes, l2_ways()), (l1_bytes, l1_ways()))
    packed = prepacked(module, views, placed)
    clipped = layouts.clipped_axes(module, views)
    pointed = (*views, *packed)  # buffers a get points at data elsewhere: no room in the workspace
    buffers = [b.name for b in module.buffers if not is_ignored_buffer(b) and b.name not in pointed]
    offsets, size = layouts.workspace(placed, buffers)
    # A view's pointer lives in the workspace too, so a phase's function sees where an earlier phase
    # (on the same workspace) pointed it: a stack slot would die with the function that set it. So do
    # a clipped view's box starts (an i64 per axis, two elements each).
    for name in pointed:
        offsets[name] = size
        size += STARTS_OFFSET + (-(-2 * len(placed[name].axes) // layouts.ALIGN_ELEMENTS) * layouts.ALIGN_ELEMENTS
                                 if name in clipped else 0)
    try:
        verify(module, "host", asynchronous=False)
    except VerificationError as error:
        raise CodegenError(f"internal error, please report it: {error}") from None
    segments = parallel.segments(module)
    base = "swauto_" + re.sub(r"\W", "_", module.name)
    symbols = {}
    for index, phases in enumerate(segments):
        kinds = ("before", "loop") if phases.loops else ("before",)
        symbols.update({phase(kind, index): f"{base}_{phase(kind, index)}" for kind in kinds})
    if segments[-1].loops:
        symbols.update(after=f"{base}_after")
        if threads.native():
            symbols.update(parallel=f"{base}_parallel")
    if packed:
        symbols.update(prepack=f"{base}_prepack")
    arguments = tuple(tensor.name for tensor in module.tensors) + tuple(p.argument for p in packed.values())
    return Plan(segments, symbols, offsets, size, placed, views, clipped, packed, arguments)


def phase(kind: str, segment: int) -> str:
    """The name of a segment's 'before' or 'loop' phase: the first segment's are 'before' and 'loop',
    the next one's 'before1' and 'loop1', and so on."""
    return kind + (str(segment) if segment else "")


def generate(module: Module, isa: Isa, knobs: Knobs) -> ir.Module:
    """LLVM IR for `module` (see the module docstring for its interface).

    Raises `CodegenError` for IR the host cannot run: non-float32 data, unknown or unbound names,
    accesses whose rank or extents disagree with their tensor, buffer or primitive.
    """
    plan = plan_kernel(module, isa, knobs)
    ir_module = ir.Module(name=module.name)
    shared = []  # per segment with a parallel group: its 'before', its 'loop', the group's iterations, its head
    for index, phases in enumerate(plan.segments):
        before = Lowering(module, plan, isa, knobs, ir_module, plan.symbols[phase("before", index)])
        before.emit(phases.before)
        if phases.loops:
            loop = Lowering(module, plan, isa, knobs, ir_module, plan.symbols[phase("loop", index)], phases)
            loop.emit_parallel(phases.lets)
            shared.append((before.function, loop.function, phases.iterations, phases.head))
    last = plan.segments[-1]
    if last.loops:
        after = Lowering(module, plan, isa, knobs, ir_module, plan.symbols["after"])
        after.emit(last.lets + last.after)
        if "parallel" in plan.symbols:
            threads.emit_parallel_entry(ir_module, shared, after.function, len(plan.arguments),
                                        plan.symbols["parallel"])
    if plan.prepacked:
        Lowering(module, plan, isa, knobs, ir_module, plan.symbols["prepack"]).emit_prepack()
    return ir_module


def _check_dtypes(module: Module) -> None:
    for tensor in module.tensors:
        if tensor.dtype != "float32":
            raise CodegenError(f"tensor {tensor.name} has dtype {tensor.dtype}; the host backend supports float32 only")
    for buffer in module.buffers:
        if buffer.dtype != "float32" and not is_ignored_buffer(buffer):
            raise CodegenError(
                f"local buffer {buffer.name} has dtype {buffer.dtype}; the host backend supports float32 buffers only"
            )


class Lowering(Visitor):
    """One use: builds one function of the kernel (`emit`, or `emit_parallel` for a segment's `phases`)."""

    def __init__(self, module: Module, plan: Plan, isa: Isa, knobs: Knobs, ir_module: ir.Module, symbol: str,
                 phases: parallel.Phases | None = None) -> None:
        self.module, self.plan, self.isa, self.knobs = module, plan, isa, knobs
        self.phases = phases  # with them, the parallel group is lowered as a range lo..hi of its iterations
        self.ir_module = ir_module
        pointer = F32.as_pointer()
        signature = ir.FunctionType(ir.VoidType(), [pointer] * (len(plan.arguments) + 1) + [I64, I64])
        self.function = ir.Function(ir_module, signature, symbol)
        self.function.attributes.add("nounwind")
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self.storage: dict[str, Storage] = {}
        self.ignored = {b.name for b in module.buffers if is_ignored_buffer(b)}
        self.written_in_place = layouts.written_in_place(module.body, plan.views)
        self._unroll_disable: ir.MDValue | None = None
        *array_args, workspace, self.lo, self.hi = self.function.args
        workspace.name = "workspace"
        for tensor, argument in zip(module.tensors, array_args, strict=False):
            argument.name = tensor.name
            argument.add_attribute("noalias")
            self._add_storage(Storage(tensor.name, tensor.shape, plan.layouts[tensor.name], argument))
        for packed, argument in zip(plan.prepacked.values(), array_args[len(module.tensors):], strict=True):
            argument.name = packed.argument
            argument.add_attribute("noalias")
            self._add_storage(Storage(packed.argument, (packed.size,), layouts.row_major((packed.size,)), argument))
        for buffer in module.buffers:
            # A view, or a buffer of prepacked tiles: a pointer its gets set.
            shown = plan.views.get(buffer.name) or (buffer.name in plan.prepacked
                                                    and plan.prepacked[buffer.name].argument)
            if shown:
                slot = self.builder.alloca(pointer, name=buffer.name)
                home = self.builder.bitcast(self.builder.gep(workspace, [i64(plan.offsets[buffer.name])],
                                                             inbounds=True), pointer.as_pointer())
                self.builder.store(self.builder.load(home), slot)
                starts = None
                if buffer.name in plan.clipped:
                    starts = self.builder.bitcast(
                        self.builder.gep(workspace, [i64(plan.offsets[buffer.name] + STARTS_OFFSET)], inbounds=True),
                        I64.as_pointer())
                self._add_storage(Storage(buffer.name, buffer.shape, plan.layouts[buffer.name], slot, shown, home,
                                          plan.clipped.get(buffer.name, ()), starts))
            elif buffer.name not in self.ignored:
                base = self.builder.gep(workspace, [i64(plan.offsets[buffer.name])], inbounds=True,
                                        name=buffer.name)
                self._add_storage(Storage(buffer.name, buffer.shape, plan.layouts[buffer.name], base))

    def _add_storage(self, storage: Storage) -> None:
        if storage.name in self.storage:
            raise CodegenError(f"the name {storage.name} is declared twice in module {self.module.name}")
        self.storage[storage.name] = storage

    # --- functions --------------------------------------------------------------------------------

    def emit(self, stmts: tuple[Stmt, ...]) -> None:
        """The function runs `stmts` in order."""
        self.visit(Seq(stmts), {})
        self.builder.ret_void()

    def emit_parallel(self, lets: tuple[Let, ...]) -> None:
        """The function runs the prologue and the top-level nest (after the top-level lets), with only
        the flattened iterations lo..hi of the parallel group."""
        phases = self.phases
        assert phases is not None and phases.nest is not None
        scope: dict[str, ir.Value] = {}
        for let in lets:
            scope[let.var] = self.expr(let.value, scope)
        self.visit(Seq(phases.prologue), scope)  # every thread fills its own copy of the nest's inputs
        self.visit(phases.nest, scope)
        self.builder.ret_void()

    def _parallel_group(self, env: Env) -> None:
        """Iterations lo..hi of the parallel group, its loop variables decoded from the flat index."""
        phases = self.phases
        assert phases is not None

        def iteration(flat: ir.Value) -> None:
            scope = dict(env)
            rest = flat
            for loop, count in reversed(list(zip(phases.loops, phases.trips, strict=True))):
                digit = self.builder.urem(rest, i64(count))
                rest = self.builder.udiv(rest, i64(count))
                value = self.builder.mul(digit, i64(loop.stride), flags=_NSW)
                scope[loop.var] = self.builder.add(self.expr(loop.start, {}), value, flags=_NSW)
            self.visit(phases.loops[-1].body, scope)

        self.loop(self.lo, self.hi, 1, "parallel", iteration, unroll=False)

    # --- statements -------------------------------------------------------------------------------

    # Each visit emits its statement at the builder's position; afterwards the builder is where
    # control continues.

    def visit_Seq(self, stmt: Seq, env: Env) -> None:
        # A view with no get (an output tile the calls write in place) is pointed at its put's box before
        # its first writer (`layout.written_view_start`).
        pointed: dict[int, list[Dma]] = {}
        for child in stmt.stmts:
            if isinstance(child, Dma) and child.direction == "put" and child.buffer.name in self.written_in_place:
                start = layouts.written_view_start(stmt, child)
                assert start is not None, f"{child.buffer.name} is a view with no get and no place to point it"
                pointed.setdefault(start, []).append(child)
        scope = dict(env)
        filled: tuple[tuple[For, ...], Call] | None = None
        for index, child in enumerate(stmt.stmts):
            for put in pointed.get(index, ()):
                self._point_view(put, scope)
            if filled is not None:  # the map whose zeroing was left out: its points start from 0
                emit_map(self, filled[1], scope, tap_values(filled[0]), from_zero=True)
                filled = None
            elif isinstance(child, Let):
                scope[child.var] = self.expr(child.value, scope)
            elif isinstance(child, Zero) and index + 1 < len(stmt.stmts) \
                    and (filled := zeroed_sum(child, stmt.stmts[index + 1])) is not None:
                continue  # (the next statement's map writes every element it zeroes)
            else:
                self.visit(child, scope)

    def visit_For(self, stmt: For, env: Env) -> None:
        if self.phases is not None and self.phases.loops[0] is stmt:
            self._parallel_group(env)
            return
        if stmt.stride == 0:
            raise CodegenError(f"loop {stmt.var} has stride 0 and would never end")
        if (taps := accumulated_taps(stmt)) is not None:
            loops, call = taps
            emit_map(self, call, env, tap_values(loops))
            return
        start, stop = self.expr(stmt.start, env), self.expr(stmt.stop, env)
        # Tile loops stay rolled: their bodies are whole copy and GEMM nests.
        self.loop(start, stop, stmt.stride, stmt.var,
                  lambda index: self.visit(stmt.body, {**env, stmt.var: index}), unroll=False)

    def visit_If(self, stmt: If, env: Env) -> None:
        condition = self.compare(stmt.cond, env)
        if stmt.otherwise is None:
            with self.builder.if_then(condition):
                self.visit(stmt.then, env)
        else:
            with self.builder.if_else(condition) as (then, otherwise):
                with then:
                    self.visit(stmt.then, env)
                with otherwise:
                    self.visit(stmt.otherwise, env)

    def visit_Let(self, stmt: Let, env: Env) -> None:
        pass  # a Let outside a Seq is dead

    def visit_DmaWait(self, stmt: DmaWait, env: Env) -> None:
        pass  # host copies are synchronous

    def visit_Alloc(self, stmt: Alloc, env: Env) -> None:
        if stmt.buffer not in {b.name for b in self.module.buffers}:
            raise CodegenError(f"alloc of {stmt.buffer}, which is not a local buffer of module {self.module.name}")

    def visit_Zero(self, stmt: Zero, env: Env) -> None:
        box = stmt.buffer
        starts = [self.expr(start, env) for start in box.starts]
        self._fill_zero(box, self.access_storage(box), starts, [b for b, e in enumerate(box.extents) if e > 1],
                        f"zero.{box.name}")

    def visit_Call(self, stmt: Call, env: Env) -> None:
        if not stmt.runs_if:
            emit_call(self, stmt, env)
            return
        runs = self.compare(stmt.runs_if[0], env)
        for condition in stmt.runs_if[1:]:
            runs = self.builder.and_(runs, self.compare(condition, env))
        with self.builder.if_then(runs):  # elsewhere a factor is a tile of padding alone (`guard_padding`)
            emit_call(self, stmt, env)

    def generic_visit(self, stmt: Stmt, env: Env) -> None:
        raise CodegenError(f"the host backend cannot lower the statement {stmt!r}")

    def visit_Dma(self, stmt: Dma, env: Env) -> None:
        if stmt.direction not in ("get", "put"):
            raise CodegenError(f"DMA direction {stmt.direction!r} is neither 'get' nor 'put'")
        if stmt.zero_fill and stmt.direction != "get":
            raise CodegenError(f"a zero-filled DMA must be a get, not a {stmt.direction}")
        packed = self.plan.prepacked.get(stmt.buffer.name)
        if packed is not None:  # a get points the buffer at its tile
            self._point_at_tile(packed, stmt, env)
            return
        if stmt.buffer.name in self.plan.views:
            # A view: a get points it at the box (a put has nothing left to do).
            if stmt.direction == "get":
                self._point_view(stmt, env)
            return
        self.copy(stmt.tensor, stmt.buffer, env, into_driver=stmt.direction == "put", zero_fill=stmt.zero_fill)

    def _point_view(self, dma: Dma, env: Env) -> None:
        """Point the view `dma` moves at the tensor box it moves."""
        view = self.storage[dma.buffer.name]
        tensor = self.access_storage(dma.tensor, allow_outside=bool(view.clipped))
        starts = [self.expr(s, env) for s in dma.tensor.starts]
        # A clipped view's box may start outside its tensor: no `inbounds` (the maps reading it move
        # their addresses of elements outside back in: `primitives.emit_map`).
        pointer = self.builder.gep(tensor.base, [self.layout_offset(tensor, starts)], inbounds=not view.clipped)
        self.builder.store(pointer, view.base)
        self.builder.store(pointer, view.home)
        for axis in view.clipped:
            assert view.starts is not None
            self.builder.store(starts[axis], self.builder.gep(view.starts, [i64(axis)], inbounds=True))

    def _point_at_tile(self, packed: Prepacked, get: Dma, env: Env) -> None:
        """Point the buffer of `packed` at the tile of `get` for the key loops' values in `env`."""
        section = packed.section(get)
        index = i64(0)
        for loop in section.loops:
            step = self.builder.sdiv(self.builder.sub(env[loop.var], i64(loop.start)), i64(loop.stride))
            index = self.builder.add(self.builder.mul(index, i64(loop.trips), flags=_NSW), step, flags=_NSW)
        offset = self.builder.add(i64(section.offset), self.builder.mul(index, i64(packed.tile), flags=_NSW),
                                  flags=_NSW)
        pointer = self.builder.gep(self.storage[packed.argument].base, [offset], inbounds=True)
        storage = self.storage[packed.buffer]
        self.builder.store(pointer, storage.base)
        self.builder.store(pointer, storage.home)

    def emit_prepack(self) -> None:
        """The function fills every prepacked array: each section's gets, once per iteration of its key
        loops, copying into the tile `_point_at_tile` points the buffer at."""
        for packed in self.plan.prepacked.values():
            for section in packed.sections:
                self._prepack_section(packed, section, 0, {})
        self.builder.ret_void()

    def _prepack_section(self, packed: Prepacked, section: Section, depth: int, env: dict[str, ir.Value]) -> None:
        if depth == len(section.loops):
            self._point_at_tile(packed, section.get, env)
            get = section.get
            self.copy(get.tensor, get.buffer, env, into_driver=False, zero_fill=get.zero_fill)
            return
        loop = section.loops[depth]

        def body(index: ir.Value) -> None:
            value = self.builder.add(i64(loop.start), self.builder.mul(index, i64(loop.stride), flags=_NSW),
                                     flags=_NSW)
            self._prepack_section(packed, section, depth + 1, {**env, loop.var: value})

        self.loop(i64(0), i64(loop.trips), 1, f"prepack.{loop.var}", body, unroll=False)

    # --- copies -----------------------------------------------------------------------------------

    def copy(self, driver: Access, follower: Access, env: Env, into_driver: bool, zero_fill: bool = False) -> None:
        """Copy between the boxes `driver` and `follower` (same number of elements, row-major element
        order), into `driver` or into `follower`. Loops run over the driver's axes; when both boxes
        have the same extents once their 1-long axes are dropped, axes pair in order, else the
        follower's indices come from the flat element number.

        With `zero_fill` (the driver is a tensor, data flows into the follower), each driver axis is
        clipped to the tensor, so only elements inside it move, and the rest of the follower box is
        zeroed: where the boxes pair axis by axis, only the border the copy leaves (a padded 30 x 30
        input tile of a 28 x 28 image: 116 of its 900 pixels; a depthwise conv's copies, zeroing
        included, took 0.28 ms instead of 0.34 with the whole tile zeroed first), else the whole box first.
        """
        d_store, f_store = self.access_storage(driver, allow_outside=zero_fill), self.access_storage(follower)
        if prod(driver.extents) != prod(follower.extents):
            raise CodegenError(f"copy between {_box(driver)} and {_box(follower)}: the boxes have "
                               f"{prod(driver.extents)} and {prod(follower.extents)} elements")
        d_axes = [a for a, e in enumerate(driver.extents) if e > 1]
        f_axes = [b for b, e in enumerate(follower.extents) if e > 1]
        paired = [driver.extents[a] for a in d_axes] == [follower.extents[b] for b in f_axes]
        d_starts = [self.expr(s, env) for s in driver.starts]
        f_starts = [self.expr(s, env) for s in follower.starts]
        name = f"copy.{driver.name}.{follower.name}"
        bounds: dict[int, tuple[ir.Value, ir.Value]] = {}
        if zero_fill:
            inside = ir.Constant(ir.IntType(1), 1)
            for a, start in enumerate(d_starts):
                if driver.in_window(a):
                    continue  # a window's axis: clipped in the copy's loops, once its walkers are known
                lo, hi = bounds[a] = self._clip(driver, d_store, a, start)
                inside = self.builder.and_(inside, self.builder.icmp_signed("<", lo, hi))
            if paired and all(a in bounds for a in d_axes):
                with self.builder.if_else(inside) as (then, otherwise):
                    with then:
                        self._fill_zero(follower, f_store, f_starts, f_axes, name, [bounds[a] for a in d_axes])
                        self._copy_nest(driver, follower, d_store, f_store, d_starts, f_starts, d_axes, f_axes,
                                        paired, bounds, into_driver, name, clip=True)
                    with otherwise:
                        self._fill_zero(follower, f_store, f_starts, f_axes, name)
                return
            self._fill_zero(follower, f_store, f_starts, f_axes, name)
            with self.builder.if_then(inside):
                self._copy_nest(driver, follower, d_store, f_store, d_starts, f_starts, d_axes, f_axes, paired,
                                bounds, into_driver, name, clip=True)
        else:
            self._copy_nest(driver, follower, d_store, f_store, d_starts, f_starts, d_axes, f_axes, paired,
                            bounds, into_driver, name)

    def _copy_nest(self, driver: Access, follower: Access, d_store: Storage, f_store: Storage,
                   d_starts: list[ir.Value], f_starts: list[ir.Value], d_axes: list[int], f_axes: list[int],
                   paired: bool, bounds: Mapping[int, tuple[ir.Value, ir.Value]], into_driver: bool,
                   name: str, clip: bool = False) -> None:
        builder = self.builder
        d_suffix = [prod(driver.extents[a] for a in d_axes[i + 1:]) for i in range(len(d_axes))]
        # A window's array axis is clipped on the innermost loop walking it, once the others are known.
        innermost_walker = {driver.walks[a]: a for a in d_axes} if driver.walks else {}
        f_suffix = [prod(follower.extents[b] for b in f_axes[i + 1:]) for i in range(len(f_axes))]

        def body(local: dict[int, ir.Value], f_override: dict[int, ir.Value]) -> None:
            d_offset = self.layout_offset(d_store, self._walked_index(driver, d_starts, local))
            if paired:
                f_local = {b: local[a] for a, b in zip(d_axes, f_axes, strict=True)}
            else:
                flat: ir.Value = i64(0)
                for a, suffix in zip(d_axes, d_suffix, strict=True):
                    flat = builder.add(flat, builder.mul(local[a], i64(suffix), flags=_NSW), flags=_NSW)
                f_local = {b: builder.urem(builder.udiv(flat, i64(suffix)), i64(follower.extents[b]))
                           for b, suffix in zip(f_axes, f_suffix, strict=True)}
            f_index = [builder.add(start, f_local[b], flags=_NSW) if b in f_local else start
                       for b, start in enumerate(f_starts)]
            f_offset = self.layout_offset(f_store, f_index, f_override)
            d_ptr = builder.gep(d_store.base, [d_offset], inbounds=True)
            f_ptr = builder.gep(f_store.base, [f_offset], inbounds=True)
            source, target = (f_ptr, d_ptr) if into_driver else (d_ptr, f_ptr)
            builder.store(builder.load(source), target)

        def level(depth: int, local: dict[int, ir.Value], f_override: dict[int, ir.Value]) -> None:
            if depth == len(d_axes):
                body(local, f_override)
                return
            a = d_axes[depth]
            if paired and depth == len(d_axes) - 2 and not into_driver and not bounds \
                    and self._transposes(driver, follower, d_store, f_store, d_axes, f_axes):
                self._transposed_blocks(driver, d_store, f_store, d_starts, f_starts, d_axes, f_axes, local, name,
                                        body)
                return
            window = driver.in_window(a)
            split = self._aligned_split(follower, f_store, f_axes[depth]) \
                if paired and a not in bounds and not window else None
            if split is None:
                lo, hi = bounds.get(a, (i64(0), i64(driver.extents[a])))
                if window and clip and a == innermost_walker[driver.walks[a]]:
                    # Its array index at i = 0: the other walkers at their loops' indices (or starts).
                    first = self._walked_index(driver, d_starts, local)[driver.walks[a]]
                    lo, hi = self._clip(driver, d_store, a, first)
                self.loop(lo, hi, 1, f"{name}.{depth}",
                          lambda i: level(depth + 1, {**local, a: i}, f_override), unroll=False)
                return
            b, panel, outer_stride, inner_stride, first = split

            def panels(outer: ir.Value, width: int = panel) -> None:
                def lanes(inner: ir.Value) -> None:
                    index = builder.add(builder.mul(outer, i64(panel), flags=_NSW), inner, flags=_NSW)
                    offset = builder.add(builder.mul(builder.add(outer, i64(first), flags=_NSW), i64(outer_stride),
                                                     flags=_NSW),
                                         builder.mul(inner, i64(inner_stride), flags=_NSW), flags=_NSW)
                    level(depth + 1, {**local, a: index}, {**f_override, b: offset})

                self.loop(i64(0), i64(width), 1, f"{name}.{depth}.lane", lanes, unroll=False)

            whole, rest = divmod(driver.extents[a], panel)
            self.loop(i64(0), i64(whole), 1, f"{name}.{depth}.panel", panels, unroll=False)
            if rest:  # the last panel, partly filled
                panels(i64(whole), rest)

        level(0, {}, {})

    def _transposes(self, driver: Access, follower: Access, d_store: Storage, f_store: Storage, d_axes: list[int],
                    f_axes: list[int]) -> bool:
        """Whether a copy into `follower` (axes paired with the driver's) transposes whole vectors over its last
        two axes: the follower packed in micro-panels along the first of them (a whole number of vectors, lanes
        contiguous, the box starting on a vector), the driver contiguous along the last (the panel's K), at
        least a vector long each, no window."""
        width = self.isa.width
        packed, inner = f_store.layout.axes[f_axes[-2]], f_store.layout.axes[f_axes[-1]]
        start = follower.starts[f_axes[-2]]
        return width > 1 and len(packed.extents) == 2 and packed.extents[1] % width == 0 \
            and packed.strides[1] == 1 and isinstance(start, Const) and start.value % width == 0 \
            and len(inner.extents) == 1 and not driver.walks and driver.step(d_axes[-1]) == 1 \
            and d_store.layout.axes[d_axes[-1]].strides == (1,) \
            and min(driver.extents[d_axes[-2]], driver.extents[d_axes[-1]]) >= width

    def _transposed_blocks(self, driver: Access, d_store: Storage, f_store: Storage, d_starts: list[ir.Value],
                           f_starts: list[ir.Value], d_axes: list[int], f_axes: list[int], local: dict[int, ir.Value],
                           name: str, element: Callable[[dict[int, ir.Value], dict[int, ir.Value]], None]) -> None:
        """Copy the driver's last two axes (`_transposes`: the follower's packed axis, then one contiguous in the
        driver) in square blocks of a vector's lanes: a vector load from each of `width` driver rows, transposed
        in registers (`transposed`), a vector store into each of `width` rows of a micro-panel; the elements
        left over from whole blocks one at a time (`element`). Element by element, LLVM vectorized such a copy
        with scatters: a third of a 0.63 ms GEMM call moving a 1 MB tile (about 5 GB/s) on an Emerald Rapids
        core; in blocks the backend's transposing copy measured 13.8 - 15.4 GB/s for 1 MB."""
        builder = self.builder
        width = self.isa.width
        vector = ir.VectorType(F32, width)
        packed, inner = d_axes[-2], d_axes[-1]
        outer = {f: local[d] for d, f in zip(d_axes, f_axes, strict=True) if d in local}
        rows, columns = driver.extents[packed], driver.extents[inner]

        def vector_at(store: Storage, offset: ir.Value) -> ir.Value:
            return builder.bitcast(builder.gep(store.base, [offset], inbounds=True), vector.as_pointer())

        def block(row: ir.Value, column: ir.Value) -> None:
            loaded = []
            for r in range(width):
                index = {**local, packed: builder.add(row, i64(r), flags=_NSW), inner: column}
                offset = self.layout_offset(d_store, self._walked_index(driver, d_starts, index))
                loaded.append(builder.load(vector_at(d_store, offset), align=4))
            for j, lanes in enumerate(transposed(builder, loaded)):
                f_local = {**outer, f_axes[-2]: row, f_axes[-1]: builder.add(column, i64(j), flags=_NSW)}
                f_index = [builder.add(start, f_local[axis], flags=_NSW) if axis in f_local else start
                           for axis, start in enumerate(f_starts)]
                builder.store(lanes, vector_at(f_store, self.layout_offset(f_store, f_index)), align=4)

        def nest(rows: tuple[int, int], columns: tuple[int, int], step: int,
                 body: Callable[[ir.Value, ir.Value], None]) -> None:
            """body(row, column) over the ranges, both in steps of `step`."""
            def row_loop(row: ir.Value) -> None:
                self.loop(i64(columns[0]), i64(columns[1]), step, f"{name}.transposed.columns",
                          lambda column: body(row, column), unroll=False)

            self.loop(i64(rows[0]), i64(rows[1]), step, f"{name}.transposed.rows", row_loop, unroll=False)

        def one(row: ir.Value, column: ir.Value) -> None:
            element({**local, packed: row, inner: column}, {})

        whole_rows, whole_columns = rows - rows % width, columns - columns % width
        nest((0, whole_rows), (0, whole_columns), width, block)
        if whole_columns < columns:
            nest((0, whole_rows), (whole_columns, columns), 1, one)
        if whole_rows < rows:
            nest((whole_rows, rows), (0, columns), 1, one)

    def _walked_index(self, box: Access, starts: list[ir.Value], local: Mapping[int, ir.Value]) -> list[ir.Value]:
        """The array index of the box's element at `local` (box axis -> index; the others at 0): per
        box axis start + index x step, summed over the axes that walk one array axis (a window)."""
        builder = self.builder
        index = [builder.add(start, local[a] if box.step(a) == 1 else
                             builder.mul(local[a], i64(box.step(a)), flags=_NSW), flags=_NSW)
                 if a in local else start for a, start in enumerate(starts)]
        if not box.walks:
            return index
        walked: list[ir.Value | None] = [None] * (max(box.walks) + 1)
        for a, value in enumerate(index):
            t = box.walks[a]
            walked[t] = value if walked[t] is None else builder.add(walked[t], value, flags=_NSW)
        return walked  # type: ignore[return-value]

    def _clip(self, box: Access, storage: Storage, axis: int, start: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The indices i of `box`'s axis `axis` whose element, at array index start + i * step, lies inside
        the array: ceil(-start / step) up to ceil((size - start) / step), both clamped to 0..extent."""
        builder = self.builder
        step = i64(box.step(axis))
        lo = self.clamp(builder.neg(self._floor_divmod(start, step, "/")), box.extents[axis])
        beyond = builder.sub(start, i64(storage.shape[box.walked(axis)]))
        hi = self.clamp(builder.neg(self._floor_divmod(beyond, step, "/")), box.extents[axis])
        return lo, hi

    def _aligned_split(self, box: Access, storage: Storage, axis: int) -> tuple[int, int, int, int, int] | None:
        """For a packed axis the box covers from a constant panel boundary (in whole panels, the last perhaps
        partly): (axis, panel, panel stride, lane stride, first panel), so the copy loops panel by panel.
        Element by element instead, each offset takes a division by the panel, which LLVM vectorized into
        64-bit compares and blends that spilled AVX2's registers (32 of 500 GEMMs' packing copies)."""
        axis_layout = storage.layout.axes[axis]
        start = box.starts[axis]
        if len(axis_layout.extents) != 2 or not isinstance(start, Const):
            return None
        panel = axis_layout.extents[1]
        if start.value % panel:
            return None
        return axis, panel, axis_layout.strides[0], axis_layout.strides[1], start.value // panel

    def _fill_zero(self, box: Access, storage: Storage, starts: list[ir.Value], axes: list[int], name: str,
                   kept: Sequence[tuple[ir.Value, ir.Value]] | None = None) -> None:
        """Zero the box's elements along `axes`; with `kept` (a range per axis), all but those inside
        every axis's range: per axis, the indices before and after its range in full, and within it
        the next axis's border."""
        def level(depth: int, local: dict[int, ir.Value], whole: bool) -> None:
            if depth == len(axes):
                if whole:
                    index = [self.builder.add(s, local[b], flags=_NSW) if b in local else s
                             for b, s in enumerate(starts)]
                    pointer = self.builder.gep(storage.base, [self.layout_offset(storage, index)], inbounds=True)
                    self.builder.store(ir.Constant(F32, 0.0), pointer)
                return
            b = axes[depth]
            if whole:
                self.loop(i64(0), i64(box.extents[b]), 1, f"{name}.zero.{depth}",
                          lambda i: level(depth + 1, {**local, b: i}, True), unroll=False)
                return
            lo, hi = kept[depth]  # type: ignore[index]
            for start, stop, part, rest_whole in ((i64(0), lo, "before", True), (lo, hi, "within", False),
                                                  (hi, i64(box.extents[b]), "after", True)):
                self.loop(start, stop, 1, f"{name}.zero.{depth}.{part}",
                          lambda i, rest_whole=rest_whole: level(depth + 1, {**local, b: i}, rest_whole), unroll=False)

        level(0, {}, kept is None)

    def clamp(self, value: ir.Value, extent: int) -> ir.Value:
        """min(max(value, 0), extent)."""
        builder = self.builder
        low = builder.select(builder.icmp_signed("<", value, i64(0)), i64(0), value)
        return builder.select(builder.icmp_signed(">", low, i64(extent)), i64(extent), low)

    # --- addresses --------------------------------------------------------------------------------

    def access_storage(self, access: Access, allow_outside: bool = False) -> Storage:
        """The storage `access` reads or writes, after checking its rank and, for constant starts,
        that the box stays inside (unless `allow_outside`: a zero-filled box may reach past it)."""
        if access.name in self.ignored:
            raise CodegenError(f"{access.name} is a float64 buffer, which the host backend does not allocate")
        storage = self.storage.get(access.name)
        if storage is None:
            raise CodegenError(f"{access.name} is neither a tensor nor a local buffer of module {self.module.name}")
        if storage.view_of is not None:
            storage = replace(storage, base=self.builder.load(storage.base))
        rank = len(storage.shape)
        axes = len(access.walks) if access.walks else rank
        if not len(access.starts) == len(access.extents) == len(access.dims) == axes:
            raise CodegenError(f"the access {_box(access)} does not have one start, extent and dim per axis "
                               f"of {access.name}, which has rank {rank}")
        box = access.bounding_box()
        for start, extent, size in zip(box.starts, box.spans(), storage.shape, strict=True):
            if extent < 1:
                raise CodegenError(f"the access {_box(access)} has an empty axis")
            if not allow_outside and isinstance(start, Const) and not 0 <= start.value <= size - extent:
                raise CodegenError(f"the access {_box(access)} leaves {access.name}, of shape {storage.shape}")
        return storage

    def layout_offset(self, storage: Storage, index: list[ir.Value],
                      override: Mapping[int, ir.Value] | None = None) -> ir.Value:
        """Elements from the start of `storage` to the element at logical `index` (one value per
        axis); `override[axis]` replaces an axis's offset when the caller has it already."""
        builder = self.builder
        offset: ir.Value = i64(0)
        for axis, (value, axis_layout) in enumerate(zip(index, storage.layout.axes, strict=True)):
            if override and axis in override:
                term = override[axis]
            elif len(axis_layout.extents) == 1:
                term = builder.mul(value, i64(axis_layout.strides[0]), flags=_NSW)
            else:
                term, rest = i64(0), value
                for extent, stride in zip(reversed(axis_layout.extents), reversed(axis_layout.strides), strict=True):
                    digit = builder.urem(rest, i64(extent))
                    rest = builder.udiv(rest, i64(extent))
                    term = builder.add(term, builder.mul(digit, i64(stride), flags=_NSW), flags=_NSW)
            offset = builder.add(offset, term, flags=_NSW)
        return offset

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
        index.add_incoming(builder.add(index, i64(step), flags=_NSW), builder.block)
        latch = builder.branch(header)
        if not unroll:
            latch.set_metadata("llvm.loop", self.no_unroll_id())
        builder.position_at_end(exit_block)

    def no_unroll_id(self) -> ir.MDValue:
        """A new loop ID (each loop needs its own) saying `llvm.loop.unroll.disable`."""
        if self._unroll_disable is None:
            disable = ir.MetaDataString(self.ir_module, "llvm.loop.unroll.disable")
            self._unroll_disable = self.ir_module.add_metadata([disable])
        return LoopID(self.ir_module, self._unroll_disable)

    # --- expressions ------------------------------------------------------------------------------

    def compare(self, cond: Compare, env: Env) -> ir.Value:
        """The i1 value of `cond` (signed comparison)."""
        if cond.op not in _COMPARISONS:
            raise CodegenError(f"unknown comparison {cond.op!r}")
        return self.builder.icmp_signed(cond.op, self.expr(cond.left, env), self.expr(cond.right, env))

    def expr(self, expr: Expr, env: Env) -> ir.Value:
        """The i64 value of `expr`, with Python's floor semantics for `/` and `%`."""
        if isinstance(expr, Const):
            return i64(expr.value)
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
        signs_differ = builder.icmp_signed("<", builder.xor(remainder, right), i64(0))
        adjust = builder.and_(builder.icmp_signed("!=", remainder, i64(0)), signs_differ)
        if op == "/":
            return builder.sub(quotient, builder.zext(adjust, I64))
        return builder.select(adjust, builder.add(remainder, right), remainder)


class LoopID(ir.MDValue):
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


def transposed(builder: ir.IRBuilder, rows: Sequence[ir.Value]) -> list[ir.Value]:
    """The columns of the square matrix whose rows are the vectors `rows` (as many as each has lanes, a power
    of two): one stage per bit of a lane index, each exchanging that bit between the row and the column
    (for rows i and i + d, d that bit: the lanes with the bit set of the first with those without it of the
    second), in shuffles of two vectors."""
    width = len(rows)
    mask_type = ir.VectorType(ir.IntType(32), width)
    columns = list(rows)
    distance = width // 2
    while distance:
        low = ir.Constant(mask_type, [j if not j & distance else width + j - distance for j in range(width)])
        high = ir.Constant(mask_type, [j + distance if not j & distance else width + j for j in range(width)])
        for i in range(width):
            if not i & distance:
                first, second = columns[i], columns[i + distance]
                columns[i] = builder.shuffle_vector(first, second, low)
                columns[i + distance] = builder.shuffle_vector(first, second, high)
        distance //= 2
    return columns


def _box(access: Access) -> str:
    return format_access(access)
