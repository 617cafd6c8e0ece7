"""The host's lowering of each primitive family: the GEMM's micro-kernel (`microkernel`), and maps and
reductions as loops over their tile, N innermost, that LLVM vectorizes where the lanes are contiguous.
A nest of small loops that only accumulates into one map's output tile runs inside each point of the
map (`accumulated_taps`): the output is loaded and stored once per point, not once per iteration.

A map's or reduction's scalar function (`swauto.primitives.elementwise`) is built from LLVM float
operations and the `llvm.exp` intrinsic, a product added to something (a map's that combines into its
output with `+`, too) in one `llvm.fmuladd`; `tanh` calls the C library's `tanhf`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from llvmlite import ir

from swauto.errors import CodegenError
from swauto.ir.analysis import trip_count
from swauto.ir.expr import Const, free_vars
from swauto.ir.nodes import Access, Call, For, Seq, Stmt, Zero
from swauto.primitives.elementwise import Scalar

from .layout import innermost_dim
from .microkernel import OperandMap, check_operand, emit_gemm, operand_map, table_lookup
from .values import F32, Env, call_function, i64

if TYPE_CHECKING:
    from .codegen import Lowering

_NSW = ("nsw",)
# The most iterations of a loop nest `accumulated_taps` runs inside each point (a 7 x 7 window's 49).
MAX_TAPS = 64


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


def accumulated_taps(loop: For) -> tuple[tuple[For, ...], Call] | None:
    """`loop`'s perfect nest and its one call, where the nest only accumulates into the call's output
    tile: the call is a map that combines (`Z += f(X, Y)`), the loops have constant bounds and at most
    MAX_TAPS iterations together, Z's access moves with none of them, and no input is Z's array. Then
    `emit_map` runs the nest inside each point of the map, in the same order, so each output element
    sums the same terms in the same order; Z is loaded and stored once per point instead of once per
    iteration (a depthwise convolution's 3 x 3 taps around its multiply-accumulate)."""
    loops: list[For] = []
    node: Stmt = loop
    while isinstance(node, For | Seq):
        if isinstance(node, Seq):
            if len(node.stmts) != 1:
                return None
            node = node.stmts[0]
            continue
        if not (isinstance(node.start, Const) and isinstance(node.stop, Const)) or node.stride < 1:
            return None
        loops.append(node)
        node = node.body
    if not isinstance(node, Call) or node.signature.kind != "map" or node.signature.combine != "+":
        return None
    if prod(trip_count(nested) for nested in loops) > MAX_TAPS:
        return None
    output = node.operand("Z")
    variables = {nested.var for nested in loops}
    if any(variables & free_vars(start) for start in output.starts):
        return None
    if _reads_its_output(node):
        return None
    return tuple(loops), node


def _reads_its_output(call: Call) -> bool:
    """Whether an input of `call` is its output's array."""
    output = call.operand("Z")
    return any(access.name == output.name for role, access in call.operands if role != "Z")


def zeroed_sum(zero: Zero, stmt: Stmt) -> tuple[tuple[For, ...], Call] | None:
    """The map `stmt` runs (a call, or a nest `accumulated_taps` runs inside its points: its loops and
    call), where it adds into exactly the box `zero` zeroes (`Z += f(...)`), unguarded: each element of
    the box is then 0 when its point loads it, so `emit_map` may start the point's sum from 0 instead and
    the zeroing be left out (MobileNetV2 block2.1.depthwise at B = 8 spent 11% of its time in `memset`
    on the output tiles, zeroed before the taps add into them). None otherwise, and where an input of the
    map reads the zeroed array."""
    if isinstance(stmt, For):
        nest = accumulated_taps(stmt)
        if nest is None:
            return None
        loops, call = nest
    elif isinstance(stmt, Call) and stmt.signature.kind == "map" and stmt.signature.combine == "+" \
            and not _reads_its_output(stmt):
        loops, call = (), stmt
    else:
        return None
    box, output = zero.buffer, call.operand("Z")
    if call.runs_if or box.name != output.name or box.starts != output.starts \
            or box.padded_extents() != output.padded_extents() or box.steps or output.steps:
        return None
    return loops, call


def taps_around(call: Call, loops: Sequence[For]) -> int:
    """How many iterations of the loops around `call` (outermost first) `emit_map` runs inside each
    of its points (1: none), as code generation finds them: the outermost loop whose nest
    `accumulated_taps` accepts around this call."""
    if call.signature.kind != "map":
        return 1
    for depth, loop in enumerate(loops):
        nest = accumulated_taps(loop)
        if nest is not None and nest[1] is call:
            return prod(trip_count(nested) for nested in loops[depth:])
    return 1


def grouped_points(registers: int) -> int:
    """How many points of a map with several taps `emit_map` computes together, on an instruction set with
    `registers` vector registers: half of them, each point's sum in one, the other half for the inputs
    and weights the points share. More spill: MobileNetV2 block1.1.depthwise at B = 1 on one thread of a
    Zen 3 (16 registers), in turns over two runs: 0.83 - 1.02 ms in groups of 16, 0.64 - 0.74 in groups
    of 8 (of 6 within that noise, of 4 slower)."""
    return max(1, registers // 2)


def tap_values(loops: Sequence[For]) -> list[dict[str, int]]:
    """Every iteration of the nest `loops` (constant bounds), in order: each loop variable's value."""
    ranges = [range(loop.start.value, loop.stop.value, loop.stride) for loop in loops]  # type: ignore[attr-defined]
    return [dict(zip((loop.var for loop in loops), values, strict=True)) for values in itertools.product(*ranges)]


def emit_map(lw: Lowering, call: Call, env: Env, taps: Sequence[Mapping[str, int]] = ({},),
             from_zero: bool = False) -> None:
    """`Z = f(X, Y, c)` (or `Z += f(X, Y, c)` for a map that combines) at every point of the tile, or for
    a reduction `Z = Z ⊕ X` (Z's offset does not move along the dimensions it does not carry, so the
    points there fold into one element). With several `taps` (a map that combines, whose Z does not move
    with them: `accumulated_taps`), each point adds `f` at each tap's values of the loop variables in
    turn to Z, which it loads and stores once. `from_zero`: a map that combines whose Z holds zeros
    (`zeroed_sum`): each point's sum starts from 0, not from Z."""
    sizes = {dim: int(value) for dim, value in call.sizes}
    if min(sizes.values(), default=1) < 1:
        raise CodegenError(f"{call.primitive} sizes must be positive, got {dict(call.sizes)}")
    for role, access in call.operands:
        check_operand(call, role, access, sizes)
    signature = call.signature
    function: Scalar = signature.cost["function"]  # type: ignore[index,assignment]
    dims = signature.dims
    builder = lw.builder
    output = operand_map(lw, call.operand("Z"), sizes, env)
    tap_envs = [{**env, **{var: i64(value) for var, value in tap.items()}} for tap in taps]
    inputs = [{role: operand_map(lw, access, sizes, tap_env) for role, access in call.operands if role != "Z"}
              for tap_env in tap_envs]
    clips = [{role: _clip(lw, access, signature.dims[-1], tap_env) for role, access in call.operands
              if role != "Z"} for tap_env in tap_envs]

    # With several taps, the dimension outside the innermost (vectorized) one runs `grouped_points` points
    # at a time: their outputs are loaded first and stored last, so the loads between hold no store and
    # LLVM loads once what they share (a tap's weights along a depthwise convolution's pixels, a pixel's
    # input at neighbouring pixels' taps). Each point still sums its terms in the same order.
    grouped = dims[-2] if len(taps) > 1 and len(dims) > 1 else None
    # Distinct arrays never overlap (tensors are distinct arguments, buffers disjoint in the workspace,
    # a view is its tensor), so where no input is in Z's array, LLVM is told that Z's accesses and the
    # inputs' loads do not alias: it then vectorizes without comparing addresses at run time.
    def memory(name: str) -> str:
        return lw.storage[name].view_of or name

    inputs_memory = {memory(access.name) for role, access in call.operands if role != "Z"}
    scoped = signature.kind != "reduce" and memory(call.operand("Z").name) not in inputs_memory
    scope = _output_scope(lw) if scoped else None  # (a reduction's accesses are left as they were)

    unclipped = [dict.fromkeys(clipped) for clipped in clips]
    # Where the clips are all one run of one dimension's index, the points inside for every tap and
    # operand read without tests; only those before and after it test theirs (a depthwise convolution's
    # tile of 14 columns: the first and last column).
    run = _inside_run(builder, [clip for clipped in clips for clip in clipped.values() if clip is not None])

    def points(group: list[dict[str, ir.Value]], clipped: bool) -> None:
        tests = clips if clipped else unclipped
        targets = [_element(lw, output, index, f"{call.primitive}.Z") for index in group]
        if signature.kind == "reduce":
            for index, target in zip(group, targets, strict=True):
                source = _read(lw, inputs[0]["X"], tests[0]["X"], index, f"{call.primitive}.X")
                values = {"x": builder.load(target, align=4), "y": source}
                builder.store(_scalar(lw, function, values, call.constant), target, align=4)
            return
        # Z += f(X, Y)
        totals = [_scoped(builder.load(target, align=4), "alias.scope", scope)
                  if signature.combine == "+" and not from_zero else None for target in targets]
        for operands, tested in zip(inputs, tests, strict=True):
            for at, index in enumerate(group):
                values = {name: _read(lw, operands[role], tested[role], index, f"{call.primitive}.{role}", scope)
                          for name, role in (("x", "X"), ("y", "Y")) if role in operands}
                if totals[at] is None:
                    totals[at] = _scalar(lw, function, values, call.constant)
                else:  # the running sum as one more input, so that a product folds into it (`_scalar`)
                    totals[at] = _scalar(lw, ("add", function, "total"), {**values, "total": totals[at]},
                                         call.constant)
        for total, target in zip(totals, targets, strict=True):
            _scoped(builder.store(total, target, align=4), "alias.scope", scope)

    def level(depth: int, index: dict[str, ir.Value], group: Sequence[ir.Value] = (), clipped: bool = True) -> None:
        if depth == len(dims):
            points([{**index, grouped: value} for value in group] if grouped else [index], clipped)
            return
        dim, size = dims[depth], sizes.get(dim := dims[depth], 1)
        if clipped and run is not None and dim == run[0]:
            split(depth, index, group, size, *run[1:])
            return
        if dim == grouped:
            count = min(grouped_points(lw.isa.registers), size)
            whole = size - size % count
            lw.loop(i64(0), i64(whole), count, f"{call.primitive}.{dim}",
                    lambda i: level(depth + 1, index, [builder.add(i, i64(k), flags=_NSW) for k in range(count)],
                                    clipped))
            if whole < size:
                level(depth + 1, index, [i64(value) for value in range(whole, size)], clipped)
            return
        # The innermost loop may be unrolled only when shorter than a vector: unrolled whole, a long
        # one leaves LLVM to vectorize the loop around it instead, with gathers (a depthwise conv's
        # [56 x 32] plane, 32 channels innermost: 7.0 ms, 10x the loop vectorized along its lanes).
        lw.loop(i64(0), i64(size), 1, f"{call.primitive}.{dim}",
                lambda i: level(depth + 1, {**index, dim: i}, group, clipped),
                unroll=depth == len(dims) - 1 and size < lw.isa.width)

    def split(depth: int, index: dict[str, ir.Value], group: Sequence[ir.Value], size: int, low: ir.Value,
              high: ir.Value) -> None:
        """The points of dimension `dims[depth]` (`size` of them) as `level` runs them, each group (or point)
        wholly in `low` .. `high` - 1 without tests, the others with them. The groups keep their
        compile-time starts, so LLVM still folds their offsets and shares the loads of neighbouring points'
        taps: groups from `low` on had doubled a depthwise tile's loads and its compile time (0.5 to 2.3 s),
        and the points of a group across the edge tested one at a time had made the picks' B = 1 tiles of
        a whole row (one group, always across) take 1.3 - 1.6x the former picks' time."""
        dim = dims[depth]
        name = f"{call.primitive}.{dim}"

        def points_from(first: ir.Value, count: int) -> None:
            def points(tested: bool) -> None:
                if dim == grouped:
                    level(depth + 1, index, [builder.add(first, i64(k), flags=_NSW) for k in range(count)], tested)
                else:
                    level(depth + 1, {**index, dim: first}, group, tested)

            inside = builder.and_(builder.icmp_signed(">=", first, low),
                                  builder.icmp_signed("<=", builder.add(first, i64(count)), high))
            with builder.if_else(inside) as (then, otherwise):
                with then:
                    points(False)
                with otherwise:
                    points(True)

        count = min(grouped_points(lw.isa.registers), size) if dim == grouped else 1
        whole = size - size % count
        lw.loop(i64(0), i64(whole), count, name, lambda i: points_from(i, count))
        if whole < size:
            points_from(i64(whole), size - whole)

    level(0, {})


def _inside_run(builder: ir.IRBuilder, clips: Sequence[_Clip]) -> tuple[str, ir.Value, ir.Value] | None:
    """(dimension, first, stop): the points whose index along the dimension is first .. stop - 1 are
    inside the tensor in every one of `clips`, where each clips one run of that dimension alone (None
    otherwise, or with no clips)."""
    if not clips or any(clip.whole is not None or clip.digits or len(clip.ranges) != 1 for clip in clips):
        return None
    dims = {clip.ranges[0][0] for clip in clips}
    if len(dims) != 1:
        return None
    first: ir.Value | None = None
    stop: ir.Value | None = None
    for clip in clips:
        _, low, count = clip.ranges[0]
        end = builder.add(low, count)
        first = low if first is None else _at_least(builder, first, low)
        stop = end if stop is None else builder.select(builder.icmp_signed("<", end, stop), end, stop)
    assert first is not None and stop is not None
    return dims.pop(), first, _at_least(builder, stop, first)


def multiply_adds(call: Call) -> bool:
    """Whether each point of the map `call` is one multiply-add (`_scalar`): its function a product that
    it adds into its output (`Z += X * Y`)."""
    signature = call.signature
    if signature.kind != "map" or signature.combine != "+":
        return False
    function = (signature.cost or {}).get("function")
    return isinstance(function, tuple) and function[0] == "mul"


def contiguous_lanes(call: Call, shapes: Mapping[str, tuple[int, ...]] | None = None) -> bool:
    """Whether `emit_map`'s (or `emit_transform`'s) innermost loop longer than 1 steps every operand that
    moves along it one element at a time. Then LLVM vectorizes the loop with plain vector loads;
    otherwise each lane is loaded and computed alone (a depthwise conv's channels with the batch
    innermost in memory). With the arrays' row-major `shapes`, the elements' offsets are computed, so
    a dimension carried by several axes counts where they run on in memory (a Winograd transform's
    channels x batch, the tile whole along the batch); without them, the dimension must be carried by
    one axis of each operand, its innermost longer than 1, with no step."""
    sizes = {dim: int(value) for dim, value in call.sizes}
    lanes = next((dim for dim in reversed(call.signature.dims) if sizes.get(dim, 1) > 1), None)
    for _, access in call.operands:
        axes = [axis for axis, dim in enumerate(access.dims) if dim == lanes]
        extents = access.padded_extents()
        shape = (shapes or {}).get(access.name)
        if shape is not None and axes:
            strides = [prod(shape[access.walked(axis) + 1:]) * access.step(axis) for axis in axes]
            # The dimension's index splits over the axes in mixed radix, the innermost axis fastest: its
            # offsets run on one by one where each axis whose digit moves steps by the extents inside it.
            inside = 1
            for axis, stride in zip(reversed(axes), reversed(strides), strict=True):
                if inside < sizes[lanes] and extents[axis] > 1 and stride != inside:
                    return False
                inside *= extents[axis]
            continue
        steps = access.steps or (1,) * len(access.dims)
        runs = [(extents[axis], steps[axis]) for axis in axes if extents[axis] > 1]
        if runs and (len(runs) > 1 or runs[0][1] != 1 or innermost_dim(access) != lanes):
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


def _output_scope(lw: Lowering) -> ir.MDValue:
    """A new alias scope (in a domain of its own) for one call's output accesses, as a scope list."""
    module = lw.ir_module
    label = f"swauto.output.{len(module.metadata)}"  # unique: the module's metadata only grows
    domain = module.add_metadata([ir.MetaDataString(module, label)])
    return module.add_metadata([module.add_metadata([ir.MetaDataString(module, f"{label}.scope"), domain])])


def _scoped(instruction: ir.Instruction, kind: str, scope: ir.MDValue | None) -> ir.Instruction:
    """`instruction` with the metadata `kind` (alias.scope or noalias) naming `scope`, if any."""
    if scope is not None:
        instruction.set_metadata(kind, scope)
    return instruction


def _element(lw: Lowering, operand: OperandMap, index: dict[str, ir.Value], name: str) -> ir.Value:
    """A pointer to the operand's element at `index` (a value per dimension it carries). (A clipped view's
    element 0 may lie outside its array: no `inbounds` from it.)"""
    return lw.builder.gep(operand.storage.base, [_offset(lw, operand, index, name)],
                          inbounds=not operand.storage.clipped)


def _offset(lw: Lowering, operand: OperandMap, index: dict[str, ir.Value], name: str) -> ir.Value:
    """Elements from the operand's storage base to its element at `index`."""
    offset = operand.base
    for dim, table in operand.tables.items():
        offset = lw.builder.add(offset, table_lookup(lw, table, index[dim], f"{name}.{dim}"), flags=_NSW)
    return offset


@dataclass(frozen=True)
class _Clip:
    """How to read an operand in a clipped view (`layout.clipped_axes`). A point is inside the tensor where
    `whole` holds (the clipped axes that carry no dimension are inside: one test per call), its index along
    each dimension of `ranges` (dimension, first, count) is in first .. first + count - 1 (a clipped axis
    outermost among its dimension's: its inside is a range of the index), and along each axis of `digits`
    (the tensor index of the box's first element there, the dimension it carries, the product of the
    extents of that dimension's axes inside it, its extent, the tensor's size) its digit of the index
    lands inside the tensor. `innermost`: the call's innermost dimension (no clipped axis carries it);
    `zeros`: a constant array of zeros as long as the operand's span along it, read in place of the
    points outside."""

    whole: ir.Value | None
    ranges: tuple[tuple[str, ir.Value, ir.Value], ...]
    digits: tuple[tuple[ir.Value, str, int, int, int], ...]
    innermost: str
    zeros: ir.Value


def _clip(lw: Lowering, access: Access, innermost: str, env: Env) -> _Clip | None:
    """How to read `access` where its storage is a clipped view (`layout.clipped_axes`); else None. What
    varies only with the call (the box's place, the tap) is computed here, once per call, not per point."""
    storage = lw.storage[access.name]
    if not storage.clipped:
        return None
    assert storage.starts is not None and storage.view_of is not None
    builder = lw.builder
    extents = access.padded_extents()
    size = lw.storage[storage.view_of].shape
    whole: ir.Value | None = None
    ranges: dict[str, tuple[ir.Value, ir.Value]] = {}
    digits = []
    for axis in storage.clipped:
        box_start = builder.load(builder.gep(storage.starts, [i64(axis)], inbounds=True))
        first = builder.add(box_start, lw.expr(access.starts[axis], env), flags=_NSW)
        dim = access.dims[axis]
        if dim is None:  # one element along the axis: inside or not for the whole call
            inside = builder.icmp_unsigned("<", first, i64(size[axis]))  # 0 <= first < size
            whole = inside if whole is None else builder.and_(whole, inside)
            continue
        carriers = [a for a, d in enumerate(access.dims) if d == dim]
        below = prod(extents[a] for a in carriers if a > axis)
        if carriers[0] != axis:
            digits.append((first, dim, below, extents[axis], size[axis]))
            continue
        # Digits 0 .. extent - 1 of the index (index // below, the outermost) are inside where
        # 0 <= first + digit < size: from -first to size - first - 1, clamped to the extent.
        low = lw.clamp(builder.neg(first), extents[axis])
        high = lw.clamp(builder.sub(i64(size[axis]), first), extents[axis])
        ranges[dim] = (builder.mul(low, i64(below)), builder.mul(builder.sub(_at_least(builder, high, low), low),
                                                                 i64(below)))
    if whole is not None and ranges:  # folded into one range: no points where it fails
        dim, (low, count) = next(iter(ranges.items()))
        ranges[dim], whole = (low, builder.select(whole, count, i64(0))), None
    # The span along the innermost dimension: the greatest offset of its table from its first.
    span = 1 + sum((extent - 1) * storage.layout.axes[axis].strides[0]
                   for axis, (extent, dim) in enumerate(zip(extents, access.dims, strict=True)) if dim == innermost)
    zeros = lw.ir_module.globals.get(f"zeros.{span}")
    if zeros is None:
        array = ir.ArrayType(F32, span)
        zeros = ir.GlobalVariable(lw.ir_module, array, f"zeros.{span}")
        zeros.linkage, zeros.global_constant, zeros.initializer = "internal", True, ir.Constant(array, None)
        zeros.align = 64
    return _Clip(whole, tuple((dim, low, count) for dim, (low, count) in ranges.items()), tuple(digits), innermost,
                 builder.bitcast(zeros, F32.as_pointer()))


def _at_least(builder: ir.IRBuilder, value: ir.Value, low: ir.Value) -> ir.Value:
    """max(value, low)."""
    return builder.select(builder.icmp_signed("<", value, low), low, value)


def _read(lw: Lowering, operand: OperandMap, clip: _Clip | None, index: dict[str, ir.Value], name: str,
          scope: ir.MDValue | None = None) -> ir.Value:
    """The operand's element at `index`; through a clipped view (`clip`), 0 where the element is outside
    its tensor, as the zero-filled copy the view stands for would hold: the point's address along the
    innermost dimension then starts from `clip.zeros` instead (whether a point is inside does not change
    along that dimension, so its loop still reads whole vectors)."""
    builder = lw.builder
    if clip is None:
        return _scoped(builder.load(_element(lw, operand, index, name), align=4), "noalias", scope)
    inner = operand.tables.get(clip.innermost)
    outer = OperandMap(operand.storage, operand.base, {d: t for d, t in operand.tables.items() if d != clip.innermost})
    offset = _offset(lw, outer, index, name)
    tests = [] if clip.whole is None else [clip.whole]
    for dim, low, count in clip.ranges:  # low <= index < low + count
        tests.append(builder.icmp_unsigned("<", builder.sub(index[dim], low), count))
    for first, dim, below, extent, size in clip.digits:
        digit = builder.urem(builder.udiv(index[dim], i64(below)), i64(extent))
        tests.append(builder.icmp_unsigned("<", builder.add(first, digit, flags=_NSW), i64(size)))  # 0 <= .. < size
    inside = tests[0]
    for test in tests[1:]:
        inside = builder.and_(inside, test)
    if inner is not None:
        offset = builder.add(offset, i64(inner[0]), flags=_NSW)
    point = builder.select(inside, builder.gep(operand.storage.base, [offset]), clip.zeros)
    if inner is not None:
        relative = tuple(value - inner[0] for value in inner)
        point = builder.gep(point, [table_lookup(lw, relative, index[clip.innermost], f"{name}.{clip.innermost}")])
    return _scoped(builder.load(point, align=4), "noalias", scope)


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
    product = next((arg for arg in args if isinstance(arg, tuple) and arg[0] == "mul"), None) if op == "add" else None
    if product is not None:
        # x * y + z in one multiply-add (`llvm.fmuladd`, an FMA where the CPU has one): a depthwise
        # convolution's taps, `Z += X * Y`, otherwise cost a multiply and an add each (MobileNetV2's
        # depthwise layers at B = 1 on an Emerald Rapids, in turns: 1.15x as fast in geometric mean on one
        # thread, 1.25x on two).
        addend = args[1] if args[0] is product else args[0]
        factors = [_scalar(lw, arg, values, constant) for arg in (*product[1:], addend)]
        return call_function(builder, "llvm.fmuladd.f32", factors)
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
        return call_function(builder, "llvm.exp.f32" if op == "exp" else "tanhf", operands)
    raise CodegenError(f"the host backend cannot lower the scalar operation {op!r}")
