"""Check a parsed operator and bind its size parameters: the result is the seed IR and its space.

Everything a user can get wrong in a `.sw` file is reported here, at its position: unknown or
duplicate names, ranks, non-affine or out-of-range indices, primitive arguments, schedule targets.
"""

from __future__ import annotations

import math
import operator as op
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from swauto.errors import ArgumentError, CheckError, ParameterError, UnsupportedSizes
from swauto.frontend import ast
from swauto.frontend.integers import MAX_ELEMENTS, MAX_SIZE, check_integer
from swauto.frontend.source import Position, Source
from swauto.ir import expr as ex
from swauto.ir.dependence import disjoint
from swauto.ir.nests import loop_nest
from swauto.ir.nodes import Access, Call, Compare, For, Module, Stmt, Tensor, seq
from swauto.primitives import REGISTRY as PRIMITIVES
from swauto.primitives import Primitive


@dataclass(frozen=True)
class SplitChoice:
    """Split a loop (`target` is its IR name) or dimension `dim` of statement `statement`'s primitive
    (`target` is `dim`, such as 'M', in an operator of one statement, else `name.dim`)."""

    target: str
    on_primitive: bool
    factors: tuple[int, ...]
    outer: str  # IR name of the loop over tiles
    inner: str | None  # IR name of the loop inside a tile (None for a primitive dimension: it stays in the call)
    dim: str | None = None
    statement: int = 0


@dataclass(frozen=True)
class FuseChoice:
    """Fuse loop `loop` into primitive dimension `into_dim`, or with the loop `with_loop` into one
    loop named `fused` (both IR names)."""

    loop: str
    into_dim: str | None = None
    with_loop: str | None = None
    fused: str | None = None
    statement: int = 0  # the statement whose primitive `into_dim` belongs to


@dataclass(frozen=True)
class ConsumerFusion:
    """Element-wise statement `consumer` may run on the output tiles of statement `producer`, in local
    memory before they are written back (a schedule choice: fused or apart)."""

    consumer: int
    producer: int
    name: str  # the consumer's name, as candidates list it


@dataclass(frozen=True)
class LayoutChoice:
    """The memory layouts a tensor may take: each lists the declared axes in memory order."""

    tensor: str
    permutations: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ScheduleSpace:
    """The choices of a schedule block, resolved to IR names. The space is their product."""

    splits: tuple[SplitChoice, ...]
    order: tuple[str, ...] | None  # a given loop order, or None
    reorder_any: tuple[int, ...]  # the statements whose loops may come in any order (without `order`)
    vectorize: tuple[str, ...]
    fuses: tuple[FuseChoice, ...] = ()
    layouts: tuple[LayoutChoice, ...] = ()
    nests: tuple[tuple[str, ...], ...] = ()  # the loops after splits and fusions, per statement, in their default order
    fusions: tuple[ConsumerFusion, ...] = ()  # in statement order
    pins: tuple[tuple[str, str], ...] = ()  # loops of `reorder_any` statements kept outermost or innermost, in order

    @property
    def loops(self) -> tuple[str, ...]:
        """Every loop, statement by statement."""
        return tuple(name for loops in self.nests for name in loops)


@dataclass(frozen=True)
class BoundOperator:
    """A checked operator with its parameters bound: the seed as IR, and the space to explore."""

    name: str
    source: Source
    params: dict[str, int]
    seed: Module
    space: ScheduleSpace


class _Checker:
    def __init__(self, operator: ast.Operator, source: Source) -> None:
        self.operator = operator
        self.source = source
        self.sizes: dict[str, int] = {}
        self.size_exprs: dict[str, ex.Expr] = {}  # symbolic: lets expanded over parameter names
        self.tensors: dict[str, ast.TensorDecl] = {}
        # The statements of the compute block: their calls, loops and seed IR calls (set by `check`).
        self.calls: list[ast.Call] = []
        self.loops: list[list[ast.ForLoop]] = []
        self.seeds: list[Call] = []
        self.nests: list[Stmt] = []
        self.loop_vars: set[str] = set()
        self.group_of: list[tuple[str, ...]] = []  # per statement, the sequence loops around it
        # Loops split into tiles of one (no split): the parts' names -> the loop (outer) or None (inner).
        self.unsplit: dict[str, str | None] = {}

    def fail(self, message: str, position: Position) -> CheckError:
        return self.source.error(CheckError, message, position)  # type: ignore[return-value]

    # --- expressions --------------------------------------------------------------------------

    def expression(self, node: ast.Expression, loop_vars: Mapping[str, object] = {}, symbolic=False) -> ex.Expr:
        """IR expression of `node`; sizes become constants (or stay symbols with `symbolic`).

        A long sum or product is a left-nested chain of BinaryOps: its spine is walked in a loop, so only
        real nesting (parentheses, functions, bounded by the parser) recurses."""
        spine: list[ast.BinaryOp] = []
        while isinstance(node, ast.BinaryOp):
            spine.append(node)
            node = node.left
        result = self.leaf(node, loop_vars, symbolic)
        for binary in reversed(spine):
            right = self.expression(binary.right, loop_vars, symbolic)
            if binary.op in "/%" and right == ex.Const(0):
                raise self.fail("division by zero", binary.position)
            apply = {"+": op.add, "-": op.sub, "*": op.mul, "/": op.floordiv, "%": op.mod}[binary.op]
            result = apply(result, right)
        return result

    def leaf(self, node: ast.Expression, loop_vars: Mapping[str, object], symbolic: bool) -> ex.Expr:
        """IR expression of a node that is not a BinaryOp."""
        if isinstance(node, ast.Number):
            return ex.Const(node.value)
        if isinstance(node, ast.Name):
            if node.id in loop_vars:
                return ex.Var(node.id)
            if node.id in self.sizes:
                return self.size_exprs[node.id] if symbolic else ex.Const(self.sizes[node.id])
            if node.id in self.tensors:
                raise self.fail(f"tensor {node.id} used where an integer is expected", node.position)
            raise self.fail(f"unknown name {node.id}", node.position)
        if isinstance(node, ast.Negate):
            return -self.expression(node.operand, loop_vars, symbolic)
        assert isinstance(node, ast.Function)
        if node.name not in ("min", "max") or len(node.args) != 2:
            raise self.fail(f"unknown function {node.name}; expected min(a, b) or max(a, b)", node.position)
        a, b = (self.expression(arg, loop_vars, symbolic) for arg in node.args)
        return ex.minimum(a, b) if node.name == "min" else ex.maximum(a, b)

    def size(self, node: ast.Expression, what: str) -> int:
        value = self.expression(node)
        if not isinstance(value, ex.Const):
            raise self.fail(f"{what} must be a size expression", ast_position(node))
        if value.value <= 0:
            raise self.fail(f"{what} is {_show(value.value)} for these parameters; sizes must be positive",
                            ast_position(node))
        if value.value > MAX_SIZE:
            raise self.fail(f"{what} is {_show(value.value)} for these parameters; sizes must be at most {MAX_SIZE}",
                            ast_position(node))
        return value.value

    # --- declarations -------------------------------------------------------------------------

    def bind_params(self, params: Mapping[str, object]) -> dict[str, int]:
        if not isinstance(params, Mapping) or not all(isinstance(name, str) for name in params):
            raise ParameterError(f"the parameters must be a mapping of names to integers, got {params!r}")
        declared: dict[str, ast.Param] = {}
        for param in self.operator.params:
            if param.name in declared:
                raise self.fail(f"parameter {param.name} is declared twice", param.position)
            declared[param.name] = param
        unknown = sorted(set(params) - set(declared))
        if unknown:
            takes = ", ".join(declared) or "no parameters"
            raise ParameterError(f"unknown parameter {unknown[0]}: operator {self.operator.name} takes {takes}")
        bound: dict[str, int] = {}
        for name, param in declared.items():
            value = params.get(name, param.default)
            if isinstance(value, str) and name not in params:  # the default names an earlier parameter
                if value not in bound:
                    raise self.fail(f"the default of parameter {name} names {value}, which is not a parameter "
                                    "declared before it", param.position)
                value = bound[value]
            if value is None:
                raise ParameterError(
                    f"parameter {name} of operator {self.operator.name} has no value; "
                    f"give it with -D {name}=VALUE (or params={{'{name}': VALUE}})"
                )
            # 0 is a valid pad; sizes built from parameters are checked to be positive
            value = check_integer(value, f"parameter {name}", 0, MAX_SIZE, ParameterError)
            bound[name] = value
            self.sizes[name] = value
            self.size_exprs[name] = ex.Var(name)
        return bound

    def declare(self, name: str, position: Position, what: str) -> None:
        if name in self.sizes or name in self.tensors:
            raise self.fail(f"{what} {name} is already declared", position)

    def check_lets(self) -> None:
        for let in self.operator.lets:
            self.declare(let.name, let.position, "size")
            symbolic = self.expression(let.value, symbolic=True)
            self.sizes[let.name] = self.size(let.value, f"{let.name}")
            self.size_exprs[let.name] = symbolic

    def check_requires(self) -> None:
        """Each `require` holds for the bound parameters, else a ParameterError names it."""
        for require in self.operator.requires:
            left, right = self.size(require.left, "a required size"), self.size(require.right, "a required size")
            if not Compare(require.op, ex.Const(left), ex.Const(right)).holds({}):
                text = self.source.line(require.position.line).strip()
                raise UnsupportedSizes(f"operator {self.operator.name} is written for `{text}`, which does not hold "
                                     f"for these parameters ({left} {require.op} {right} is false)")

    def check_tensors(self) -> None:
        for tensor in self.operator.tensors:
            self.declare(tensor.name, tensor.position, "tensor")
            elements = math.prod(self.size(axis, f"axis of tensor {tensor.name}") for axis in tensor.shape)
            if elements > MAX_ELEMENTS:
                raise self.fail(f"tensor {tensor.name} has {_show(elements)} elements for these parameters; "
                                f"a tensor may have at most {MAX_ELEMENTS} (2**40)", tensor.position)
            self.tensors[tensor.name] = tensor

    # --- the compute seed -----------------------------------------------------------------------

    def seed(self) -> tuple[Stmt, list[tuple[Stmt, ast.Call, list[ast.ForLoop]]]]:
        """The compute block as IR, and each of its statements as a perfect loop nest around one call
        (its IR, the call and its loops). A loop around several statements is a *sequence loop*: each
        of its iterations runs them in order (an LSTM's time steps), so it is never reordered, split
        or fused, and the nests inside see its variable as a number."""
        if not self.operator.compute:
            raise self.fail("the compute block is empty; it needs at least one primitive call", self.operator.position)
        nests: list[tuple[Stmt, ast.Call, list[ast.ForLoop]]] = []
        body = self.block(self.operator.compute, {}, nests, ())
        return body, nests

    def block(self, block: tuple[ast.Statement, ...], outer: dict[str, tuple[int, int]],
              nests: list[tuple[Stmt, ast.Call, list[ast.ForLoop]]], group: tuple[str, ...]) -> Stmt:
        """The IR of a sequence of statements inside the sequence loops `group` (their ranges `outer`),
        appending each nest to `nests`."""
        parts: list[Stmt] = []
        for statement in block:
            loops: list[ast.ForLoop] = []
            while isinstance(statement, ast.ForLoop):
                self.declare(statement.var, statement.position, "name")
                if statement.var in self.loop_vars:
                    raise self.fail(f"loop variable {statement.var} is already used by another loop; loop names "
                                    "are unique in an operator (the schedule block names loops)", statement.position)
                self.loop_vars.add(statement.var)
                if len(statement.body) > 1:
                    if loops:
                        raise self.fail(
                            f"loop {statement.var} holds several statements, so it runs them in sequence; it must "
                            f"be outside every other loop of its statement, not inside loop {loops[-1].var}",
                            statement.position)
                    ranges = {**outer, statement.var: self.loop_range(statement, outer)}
                    inner = self.block(statement.body, ranges, nests, (*group, statement.var))
                    lo, hi = ranges[statement.var]
                    parts.append(For(statement.var, ex.Const(lo), ex.Const(hi + 1), 1, inner))
                    break
                if not statement.body:
                    raise self.fail(f"loop {statement.var} is empty", statement.position)
                loops.append(statement)
                statement = statement.body[0]
            else:
                nest = self.nest(statement, loops, outer)
                nests.append(nest)
                self.group_of.append(group)
                parts.append(nest[0])
        return seq(*parts)

    def loop_range(self, loop: ast.ForLoop, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """The first and last value of a loop with constant bounds."""
        start = self.expression(loop.start, ranges)
        stop = self.expression(loop.stop, ranges)
        if not (isinstance(start, ex.Const) and isinstance(stop, ex.Const)):
            raise self.fail(f"the bounds of loop {loop.var} must be size expressions", loop.position)
        if max(abs(start.value), abs(stop.value)) > MAX_SIZE:
            raise self.fail(f"loop {loop.var} runs {_show(start.value)}..{_show(stop.value)}; loop bounds "
                            f"must be at most {MAX_SIZE} in magnitude", loop.position)
        if stop.value <= start.value:
            raise self.fail(f"loop {loop.var} runs {start.value}..{stop.value}, which is empty for these parameters",
                            loop.position)
        return start.value, stop.value - 1

    def nest(self, call: ast.Call, loops: list[ast.ForLoop], outer: Mapping[str, tuple[int, int]] = {}
             ) -> tuple[Stmt, ast.Call, list[ast.ForLoop]]:
        ranges: dict[str, tuple[int, int]] = dict(outer)
        for loop in loops:
            ranges[loop.var] = self.loop_range(loop, ranges)
        body: Stmt = self.call(call, ranges, loops)
        for loop in reversed(loops):
            lo, hi = ranges[loop.var]
            body = For(loop.var, ex.Const(lo), ex.Const(hi + 1), 1, body)
        return body, call, loops

    def call(self, call: ast.Call, ranges: Mapping[str, tuple[int, int]], loops: list[ast.ForLoop]) -> Call:
        signature = PRIMITIVES.get(call.primitive)
        if signature is None:
            known = ", ".join(sorted(PRIMITIVES))
            raise self.fail(f"unknown primitive {call.primitive}; swauto knows {known}", call.position)
        takes = _arguments(signature)
        arguments: dict[str, ast.Argument] = {}
        for argument in call.arguments:
            if argument.name not in takes:
                raise self.fail(f"{call.primitive} has no argument {argument.name}; it takes {', '.join(takes)}",
                                argument.position)
            if argument.name in arguments:
                raise self.fail(f"argument {argument.name} is given twice", argument.position)
            arguments[argument.name] = argument
        # A map's or reduction's dimensions default to 1 (a row, or a single element); the GEMM needs all three.
        required = (*(signature.dims if signature.kind == "gemm" else ()), *signature.roles,
                    *((signature.constant,) if signature.constant else ()))
        missing = [name for name in required if name not in arguments]
        if missing:
            raise self.fail(f"{call.primitive} needs argument {missing[0]}", call.position)
        output_role = signature.output_role
        for argument in arguments.values():
            if argument.accumulate and argument.name != output_role:
                raise self.fail(f"only the output {output_role} of {call.primitive} can be given with +=",
                                argument.position)
            if argument.accumulate and not signature.combine:
                raise self.fail(f"{call.primitive} stores its result; += applies to primitives that combine into "
                                "their output (gemm, reduce_sum, reduce_max)", argument.position)
        sizes: dict[str, int] = {}
        symbolic: dict[str, ex.Expr] = {}
        for name in signature.dims:
            if name not in arguments:
                sizes[name], symbolic[name] = 1, ex.Const(1)
                continue
            value = arguments[name].value
            if not isinstance(value, ast.Number | ast.Name | ast.BinaryOp | ast.Negate | ast.Function):
                raise self.fail(f"{name} must be a size expression", arguments[name].position)
            for var in ranges:
                if var in _names(value):
                    raise self.fail(f"{call.primitive}'s {name} must not depend on loop {var}", ast_position(value))
            sizes[name] = self.size(value, f"{call.primitive}'s {name}")
            symbolic[name] = self.expression(value, symbolic=True)
        # A transform's matrix fixes two of its sizes.
        for dim, value in dict((signature.cost or {}).get("sizes", {})).items():  # type: ignore[call-overload]
            if dim not in arguments:
                raise self.fail(f"{call.primitive} needs argument {dim} (= {value})", call.position)
            if sizes[dim] != value:
                raise self.fail(f"{call.primitive}'s {dim} is {value}, the size of its matrix, not {sizes[dim]}",
                                arguments[dim].position)
        given = {name for name in signature.dims if name in arguments}
        operands = {}
        for role, dims in (*signature.inputs, signature.output):
            partial = signature.reduces_missing if role == output_role else signature.broadcast
            operands[role] = self.operand(arguments[role], tuple(d for d in dims if d in given), sizes, symbolic,
                                          ranges, role == output_role, partial)
        constant = None
        if signature.constant:
            constant = self.constant(arguments[signature.constant])
        out = operands[output_role]
        for role, _ in signature.inputs:
            if operands[role].name != out.name:
                continue
            if signature.combine or operands[role] != out and not self.apart(operands[role], out, loops, ranges):
                raise self.fail(
                    f"tensor {out.name} is both read as {role} and written; an element-wise map may read the box "
                    "it writes, or parts of the tensor it never writes, and other primitives neither",
                    arguments[role].position,
                )
        if not signature.combine:
            self.check_writes_once(call, out, loops, ranges)
        return Call(call.primitive, tuple((dim, sizes[dim]) for dim in signature.dims if dim in given),
                    tuple((role, operands[role]) for role in signature.roles),
                    overwrite=not arguments[output_role].accumulate and bool(signature.combine), constant=constant)

    def constant(self, argument: ast.Argument) -> float:
        """A primitive's scalar argument: a decimal literal, or an expression of sizes in which `/`
        divides exactly (`by = 1 / (K * K)` is 0.25 for K = 2)."""
        value = argument.value
        if isinstance(value, ast.FloatLiteral):
            return value.value
        if isinstance(value, ast.Slice) or isinstance(value, ast.Name) and value.id in self.tensors:
            raise self.fail(f"{argument.name} is a number, not a tensor", argument.position)
        return float(self.real(value))

    def real(self, node: ast.Expression) -> Fraction:
        """The exact value of a size expression with `/` as true division (nesting is bounded by the parser)."""
        if isinstance(node, ast.BinaryOp):
            left, right = self.real(node.left), self.real(node.right)
            if node.op in "/%" and right == 0:
                raise self.fail("division by zero", node.position)
            apply = {"+": op.add, "-": op.sub, "*": op.mul, "/": op.truediv, "%": op.mod}[node.op]
            return apply(left, right)
        if isinstance(node, ast.Negate):
            return -self.real(node.operand)
        if isinstance(node, ast.Function) and node.name in ("min", "max") and len(node.args) == 2:
            values = [self.real(arg) for arg in node.args]
            return min(values) if node.name == "min" else max(values)
        value = self.expression(node)
        if not isinstance(value, ex.Const):
            raise self.fail("a scalar argument must be a number or an expression of sizes", ast_position(node))
        return Fraction(value.value)

    def apart(self, read: Access, written: Access, loops: list[ast.ForLoop],
              ranges: Mapping[str, tuple[int, int]]) -> bool:
        """Whether no iteration of `loops` reads an element of `read` that any iteration writes in
        `written` (the loops around, sequence loops, are the same for both)."""
        other = {loop.var: ex.Var(f"{loop.var}'") for loop in loops}
        both = {**ranges, **{f"{loop.var}'": ranges[loop.var] for loop in loops}}
        starts = tuple(ex.substitute(start, other) for start in read.starts)
        return disjoint(written.starts, written.extents, starts, read.extents, both)  # type: ignore[arg-type]

    def check_writes_once(self, call: ast.Call, out: Access, loops: list[ast.ForLoop],
                          ranges: Mapping[str, tuple[int, int]]) -> None:
        """A primitive that stores its result may only be inside loops that each move its output to a
        place of its own (else a later iteration would overwrite an earlier one's result, and the
        order of the loops would matter): each loop indexes one axis of the output, and the loops on
        one axis step it in mixed radix (`2 * t + r` with r in 0..2), each by at least the span of the
        boxes of the loops inside it."""
        by_axis: dict[int, list[tuple[int, ast.ForLoop]]] = {}
        for loop in loops:
            steps = {}
            for axis, start in enumerate(out.starts):
                form = ex.linear_form(start)
                steps[axis] = form[0].get(loop.var, 0) if form is not None else None
            indexed = [axis for axis, step in steps.items() if step != 0]
            if len(indexed) != 1 or steps[indexed[0]] is None:
                raise self.fail(
                    f"{call.primitive} stores its result, so each iteration of loop {loop.var} must write its own "
                    f"part of {out.name}: index one axis of it with {loop.var} (stepping at least the extent of "
                    "that axis' box)",
                    loop.position,
                )
            by_axis.setdefault(indexed[0], []).append((abs(steps[indexed[0]]), loop))
        for axis, stepping in by_axis.items():
            span = out.extents[axis]
            for step, loop in sorted(stepping, key=lambda pair: pair[0]):
                if step < span:
                    raise self.fail(
                        f"{call.primitive} stores its result, so each iteration of loop {loop.var} must write its "
                        f"own part of {out.name}, but it steps axis {axis} by {step} where the boxes inside it "
                        f"span {span} elements",
                        loop.position,
                    )
                low, high = ranges[loop.var]
                span += step * (high - low)

    def operand(self, argument: ast.Argument, dims: tuple[str, ...], sizes: Mapping[str, int],
                symbolic: Mapping[str, ex.Expr], ranges: Mapping[str, tuple[int, int]], writes: bool,
                partial: bool = False) -> Access:
        """The box of `argument`: its indexed axes at their starts, its open axes carrying `dims`
        (all of them, or with `partial` a subset: broadcast, or reduced over)."""
        value = argument.value
        if isinstance(value, ast.Name) and value.id in self.tensors:
            value = ast.Slice(value.id, (), value.position)
        if not isinstance(value, ast.Slice):
            raise self.fail(f"operand {argument.name} must be a tensor or a slice of one", argument.position)
        if value.tensor not in self.tensors:
            raise self.fail(f"unknown tensor {value.tensor}", value.position)
        tensor = self.tensors[value.tensor]
        rank = len(tensor.shape)
        if len(value.indices) > rank:
            raise self.fail(f"tensor {tensor.name} has {rank} axes but {len(value.indices)} indices are given",
                            value.position)
        axis_dims: list[str | None] = [None] * rank
        starts: list[ex.Expr] = [ex.Const(0)] * rank
        open_axes = list(range(len(value.indices), rank))
        tiled: set[int] = set()  # axes carrying a dimension from an offset (`:J + t`): a tile of the axis
        for axis, index in enumerate(value.indices):
            if isinstance(index, ast.DimIndex):
                if index.dim not in dims:
                    raise self.fail(f"operand {argument.name} carries {' and '.join(dims)}, not {index.dim}",
                                    index.position)
                if index.dim in axis_dims:
                    raise self.fail(f"dimension {index.dim} is given twice", index.position)
                axis_dims[axis] = index.dim
                if index.offset is not None:
                    tiled.add(axis)
                    starts[axis] = self.index(index.offset, tensor, axis, ranges, writes, sizes[index.dim])
                continue
            starts[axis] = self.index(index, tensor, axis, ranges, writes)
        free = [d for d in dims if d not in axis_dims]
        for axis in open_axes:
            axis_dims[axis] = self.match_dim(tensor, axis, free, sizes, symbolic, value.position)
            free.remove(axis_dims[axis])
        if free and not partial:
            raise self.fail(
                f"operand {argument.name} must carry dimensions {' and '.join(dims)}; "
                f"{value.tensor} leaves no axis for {free[0]} (write :{free[0]} at that axis)",
                value.position,
            )
        extents = []
        for axis, dim in enumerate(axis_dims):
            extent = self.sizes_of(tensor)[axis]
            if dim is not None and extent != sizes[dim] and axis not in tiled:
                raise self.fail(
                    f"axis {axis} of tensor {tensor.name} has {extent} elements but the primitive's {dim} "
                    f"is {sizes[dim]}",
                    value.position,
                )
            extents.append(1 if dim is None else sizes[dim])
        return Access(tensor.name, tuple(starts), tuple(extents), tuple(axis_dims))

    def index(self, node: ast.Expression, tensor: ast.TensorDecl, axis: int, ranges: Mapping[str, tuple[int, int]],
              writes: bool, size: int = 1) -> ex.Expr:
        """The first index of a box of `size` elements along `axis` of `tensor`, checked to be affine in
        the loop variables and, over their ranges, inside the tensor (a padded tensor's reads may
        reach outside: they give zeros)."""
        start = self.expression(node, ranges)
        if ex.linear_form(start) is None:
            raise self.fail(f"index {_show_expr(start)} is not affine in the loop variables", ast_position(node))
        low, high = ex.bounds(start, ranges)
        high += size - 1
        extent = self.sizes_of(tensor)[axis]
        if (low < 0 or high >= extent) and (writes or not tensor.padded):
            hint = "" if writes else f" (declare `tensor {tensor.name}[...] padded` to read zeros there)"
            shown = _show_expr(start) if size == 1 else f"{_show_expr(start)} + (0..{size - 1})"
            raise self.fail(
                f"index {shown} of tensor {tensor.name} axis {axis} takes values {_show(low)}..{_show(high)}, "
                f"outside 0..{extent - 1}{hint}",
                ast_position(node),
            )
        return start

    def match_dim(self, tensor: ast.TensorDecl, axis: int, free: list[str], sizes: Mapping[str, int],
                  symbolic: Mapping[str, ex.Expr], position: Position) -> str:
        """The primitive dimension an unindexed axis carries: the free one whose size expression is
        the axis' declared extent, else the only one with the same value."""
        declared = self.expression(tensor.shape[axis], symbolic=True)
        by_symbol = [d for d in free if symbolic[d] == declared]
        if len(by_symbol) == 1:
            return by_symbol[0]
        extent = self.sizes_of(tensor)[axis]
        by_value = [d for d in free if sizes[d] == extent]
        if len(by_value) == 1:
            return by_value[0]
        if not by_value:
            raise self.fail(
                f"axis {axis} of tensor {tensor.name} ({extent} elements) matches none of the primitive "
                f"dimensions {', '.join(free)} left for it",
                position,
            )
        raise self.fail(
            f"cannot tell which of {', '.join(by_value)} axis {axis} of tensor {tensor.name} carries; "
            f"name it with :{by_value[0]}",
            position,
        )

    def sizes_of(self, tensor: ast.TensorDecl) -> tuple[int, ...]:
        return tuple(ex.evaluate(self.expression(axis), {}) for axis in tensor.shape)

    # --- the schedule block ---------------------------------------------------------------------

    def statement(self, name: str, position: Position) -> int:
        """The index of the statement called `name` (its label, or its primitive's name)."""
        matches = [index for index, call in enumerate(self.calls) if call.name == name]
        if not matches:
            names = ", ".join(dict.fromkeys(call.name for call in self.calls))
            raise self.fail(f"no statement named {name}; the statements are {names}", position)
        if len(matches) > 1:
            raise self.fail(f"{len(matches)} statements are named {name}; give them labels (`{name}1: {name}(...)`) "
                            "and name those", position)
        return matches[0]

    def dim_names(self, statement: int, dim: str) -> tuple[str, str]:
        """(candidate key, loop over tiles) of primitive dimension `dim` of `statement`: `M`, `M_outer`
        for an operator of one statement, else qualified by the statement's name."""
        if len(self.calls) == 1:
            return dim, f"{dim}_outer"
        name = self.calls[statement].name
        return f"{name}.{dim}", f"{name}_{dim}_outer"

    def schedule(self, seeds: list[Call]) -> ScheduleSpace:
        nest_loops = [[loop.var for loop in loops] for loops in self.loops]
        splits: list[SplitChoice] = []
        fuses: list[tuple[FuseChoice, ast.Fuse]] = []
        layouts: list[LayoutChoice] = []
        reorders = [d for d in self.operator.schedule if isinstance(d, ast.Reorder)]
        vectorizes = [d for d in self.operator.schedule if isinstance(d, ast.Vectorize)]
        per_statement = all(r.statement is not None for r in reorders)  # `reorder gemm any`, one per statement
        for extra in (reorders[1:2] if not per_statement else [], vectorizes[1:2]):
            for directive in extra:
                word = "reorder" if isinstance(directive, ast.Reorder) else "vectorize"
                raise self.fail(f"the schedule has two {word} directives", directive.position)
        fusions: list[tuple[ConsumerFusion, ast.Fuse]] = []
        for directive in self.operator.schedule:
            if isinstance(directive, ast.Split):
                choice = self.split(directive, nest_loops, splits)
                if not choice.on_primitive and choice.factors == (1,):
                    # Tiles of one iteration (factors that are 1 for these parameters) are no split: the loop
                    # keeps its name, and fusing its inner part into a primitive changes nothing.
                    self.unsplit[choice.outer] = choice.target
                    self.unsplit[choice.inner] = None
                    continue
                splits.append(choice)
            elif isinstance(directive, ast.Fuse) and directive.into_primitive and len(directive.into.parts) == 1:
                fusions.append((self.consumer_fusion(directive, seeds), directive))
            elif isinstance(directive, ast.Fuse):
                fuses.append((self.fuse(directive, seeds), directive))
            elif isinstance(directive, ast.Layout):
                if any(layout.tensor == directive.tensor for layout in layouts):
                    raise self.fail(f"tensor {directive.tensor} has two layout directives", directive.position)
                layouts.append(self.layout(directive, seeds))
        vectorizable = [index for index, call in enumerate(seeds) if call.signature.vectorizable]
        vectorize: tuple[str, ...] = seeds[vectorizable[0]].signature.vectorizable if vectorizable else ("",)
        if vectorizes:
            directive = vectorizes[0]
            statement = self.statement(directive.primitive, directive.position)
            signature = seeds[statement].signature
            if not signature.vectorizable:
                raise self.fail(f"{directive.primitive} has no vectorized dimension to choose", directive.position)
            for dim in directive.dims:
                if dim not in signature.vectorizable:
                    raise self.fail(
                        f"{directive.primitive} can be vectorized over {' or '.join(signature.vectorizable)}, "
                        f"not {dim}", directive.position)
            vectorize = tuple(dict.fromkeys(directive.dims))
        for split in splits:
            loops = nest_loops[split.statement]
            if split.on_primitive:
                loops.append(split.outer)
            else:
                index = loops.index(split.target)
                loops[index : index + 1] = [split.outer, split.inner]  # type: ignore[list-item]
        all_loops = [name for loops in nest_loops for name in loops]
        if len(set(all_loops)) != len(all_loops):
            duplicate = next(name for name in all_loops if all_loops.count(name) > 1)
            raise self.fail(f"a split creates loop {duplicate}, which already exists", self.operator.position)
        fuses = [(fuse, directive) for fuse, directive in fuses
                 if not (fuse.into_dim is not None and fuse.loop in self.unsplit)]
        for fuse, directive in fuses:
            for name in (fuse.loop, fuse.with_loop):
                if name is not None and name not in all_loops:
                    known = f"the loops are {', '.join(all_loops)}" if all_loops else "the nest has no loops"
                    raise self.fail(f"no loop {name} to fuse; {known}", directive.position)
            loops = next(loops for loops in nest_loops if fuse.loop in loops)
            if fuse.into_dim is not None:
                if fuse.loop not in [loop.var for loop in self.loops[fuse.statement]] and \
                        not any(fuse.loop in (s.outer, s.inner) and s.statement == fuse.statement for s in splits):
                    raise self.fail(f"loop {fuse.loop} is not around {self.calls[fuse.statement].name}",
                                    directive.position)
                loops.remove(fuse.loop)
            else:
                assert fuse.with_loop is not None and fuse.fused is not None
                if fuse.with_loop not in loops:
                    raise self.fail(f"loops {fuse.loop} and {fuse.with_loop} are in different statements",
                                    directive.position)
                loops.remove(fuse.with_loop)
                loops[loops.index(fuse.loop)] = fuse.fused
            all_loops = [name for loops in nest_loops for name in loops]
        order = None
        if reorders and reorders[0].order is not None:
            order = tuple(self.loop_target(t) for t in reorders[0].order)
            if sorted(order) != sorted(all_loops):
                if not all_loops:
                    raise self.fail("there are no loops to reorder (split a dimension first)", reorders[0].position)
                raise self.fail(f"reorder must list every loop exactly once: {', '.join(all_loops)}",
                                reorders[0].position)
        reorder_any: tuple[int, ...] = ()
        if reorders and reorders[0].order is None:
            reorder_any = tuple(range(len(nest_loops)))
            if per_statement:
                reorder_any = tuple(self.statement(r.statement, r.position) for r in reorders)  # type: ignore[arg-type]
                if len(set(reorder_any)) != len(reorder_any):
                    raise self.fail("a statement is reordered twice", reorders[-1].position)
                reorder_any = tuple(sorted(reorder_any))
        pins: list[tuple[str, str]] = []
        for reorder in reorders:
            for target, place in reorder.pins:
                loop = self.loop_target(target)
                free = [name for statement in reorder_any for name in nest_loops[statement]]
                if loop not in free:
                    known = f"the loops reordered are {', '.join(free)}" if free else "no loop is reordered"
                    raise self.fail(f"no loop {target} to keep {place}; {known}", target.position)
                if any(name == loop for name, _ in pins):
                    raise self.fail(f"loop {target} is given two places", target.position)
                pins.append((loop, place))
        for fusion, directive in fusions:
            chain = sorted(f.consumer for f, _ in fusions if f.producer == fusion.producer)
            if chain != list(range(fusion.producer + 1, fusion.producer + 1 + len(chain))):
                producer = self.calls[fusion.producer].name
                raise self.fail(f"{fusion.name} can be fused into {producer} only together with every statement "
                                "between them (fuse those too)", directive.position)
            if len([f for f, _ in fusions if f.consumer == fusion.consumer]) > 1:
                raise self.fail(f"{fusion.name} is fused twice", directive.position)
        return ScheduleSpace(tuple(splits), order, reorder_any, vectorize, tuple(f for f, _ in fuses), tuple(layouts),
                             tuple(tuple(loops) for loops in nest_loops),
                             tuple(sorted((f for f, _ in fusions), key=lambda f: f.consumer)), tuple(pins))

    def consumer_fusion(self, directive: ast.Fuse, seeds: list[Call]) -> ConsumerFusion:
        """`fuse relu into gemm`: checked to be expressible as relu running on gemm's output tiles."""
        if len(directive.source.parts) != 1:
            raise self.fail(f"{directive.source} is not a statement", directive.source.position)
        consumer = self.statement(directive.source.parts[0], directive.source.position)
        producer = self.statement(directive.into.parts[0], directive.into.position)
        name, into = self.calls[consumer].name, self.calls[producer].name
        if consumer <= producer:
            raise self.fail(f"{name} does not come after {into}; a statement is fused into the one that produces "
                            "its input", directive.position)
        if self.group_of[consumer] != self.group_of[producer]:
            raise self.fail(f"{name} and {into} are not inside the same sequence loops; a statement is fused into "
                            "a producer that runs as often as it does", directive.position)
        call, producing = seeds[consumer], seeds[producer]
        tensor = producing.output.name
        if call.signature.kind != "map":
            raise self.fail(f"only element-wise maps can be fused into their producer; {name} is a "
                            f"{call.signature.kind}", directive.position)
        if call.output.name != tensor:
            raise self.fail(f"{name} does not write {tensor}, the output of {into}; a fused statement works on "
                            "its producer's output tiles in place", directive.position)
        for role, access in call.operands[:-1]:
            if access.name == tensor and access != call.output:
                raise self.fail(f"{name} reads {tensor} elsewhere than where it writes it", directive.position)
            if access.name != tensor and (None in access.dims
                                          or any(call.output.dims.count(d) != 1 for d in access.dims)):
                raise self.fail(f"{name}'s input {role} = {access.name} must carry only its dimensions, each on one "
                                f"axis of {tensor}, to follow {into}'s tiles", directive.position)
        for index in (producer, consumer):
            loops, seed = loop_nest(self.nests[index])
            if not _covers(seed.output, loops, self.sizes_of(self.tensors[tensor])):
                raise self.fail(f"{self.calls[index].name} does not write the whole of {tensor} once per element, "
                                "which fusing needs", directive.position)
        return ConsumerFusion(consumer, producer, name)

    def fuse(self, directive: ast.Fuse, seeds: list[Call]) -> FuseChoice:
        loop = self.loop_target(directive.source)
        if not directive.into_primitive:
            other = self.loop_target(directive.into)
            if other == loop:
                raise self.fail(f"cannot fuse loop {directive.source} with itself", directive.into.position)
            return FuseChoice(loop, with_loop=other, fused=f"{loop}_{other}")
        parts = directive.into.parts
        if len(parts) != 2:
            raise self.fail(f"cannot fuse into {directive.into}: expected a statement's dimension, such as gemm.M",
                            directive.into.position)
        statement = self.statement(parts[0], directive.into.position)
        call = seeds[statement]
        if parts[1] not in dict(call.sizes):
            dims = ", ".join(f"{parts[0]}.{dim}" for dim, _ in call.sizes)
            raise self.fail(f"cannot fuse into {directive.into}: expected one of {dims}", directive.into.position)
        return FuseChoice(loop, into_dim=parts[1], statement=statement)

    def layout(self, directive: ast.Layout, seeds: list[Call]) -> LayoutChoice:
        tensor = self.tensors.get(directive.tensor)
        if tensor is None:
            raise self.fail(f"unknown tensor {directive.tensor}", directive.position)
        names = [axis.id if isinstance(axis, ast.Name) else None for axis in tensor.shape]
        if None in names or len(set(names)) != len(names):
            raise self.fail(
                f"a layout names the axes of {tensor.name} by their declared sizes, which must be distinct names",
                directive.position,
            )
        # Axes indexed by loops stay in front, in order: only the primitives' axes may be permuted.
        accesses = [access for call in seeds for _, access in call.operands if access.name == tensor.name]
        fixed = {axis for access in accesses for axis, dim in enumerate(access.dims) if dim is None}
        permutations = []
        for choice in directive.choices:
            if sorted(choice) != sorted(names):  # type: ignore[type-var]
                raise self.fail(f"a layout of {tensor.name} lists each of {', '.join(names)} once",  # type: ignore
                                directive.position)
            permutation = tuple(names.index(name) for name in choice)
            if any(permutation[axis] != axis for axis in fixed):
                raise self.fail(
                    f"axes of {tensor.name} indexed by loops must keep their place; only the primitive's axes move",
                    directive.position,
                )
            permutations.append(permutation)
        return LayoutChoice(tensor.name, tuple(dict.fromkeys(permutations)))

    def split(self, directive: ast.Split, nest_loops: list[list[str]], done: list[SplitChoice]) -> SplitChoice:
        parts = directive.target.parts
        values = []
        for factor in directive.factors:
            value = self.expression(factor)
            if not isinstance(value, ex.Const):
                raise self.fail("a split factor must be an integer expression of the parameters",
                                ast_position(factor))
            if value.value <= 0:
                raise self.fail(f"split factors must be positive; this one is {_show(value.value)} for these "
                                "parameters", ast_position(factor))
            values.append(value.value)
        factors = tuple(sorted(set(values)))
        if len(parts) == 1:
            statement = next((index for index, loops in enumerate(nest_loops) if parts[0] in loops), None)
            if statement is None:
                raise self.fail(f"no loop named {parts[0]} to split", directive.target.position)
            choice = SplitChoice(parts[0], False, factors, f"{parts[0]}_outer", f"{parts[0]}_inner",
                                 statement=statement)
        else:
            statement = self.statement(parts[0], directive.target.position)
            dims = [dim for dim, _ in self.seeds[statement].sizes]
            if len(parts) != 2 or parts[1] not in dims:
                names = ", ".join(f"{parts[0]}.{dim}" for dim in dims)
                raise self.fail(f"cannot split {directive.target}: expected a loop name or one of {names}",
                                directive.target.position)
            key, outer = self.dim_names(statement, parts[1])
            choice = SplitChoice(key, True, factors, outer, None, dim=parts[1], statement=statement)
        if any(s.target == choice.target for s in done) or choice.outer in self.unsplit:
            raise self.fail(f"{directive.target} is split twice", directive.position)
        return choice

    def loop_target(self, target: ast.Target) -> str:
        parts = target.parts
        if len(parts) == 3 and parts[2] == "outer" and any(call.name == parts[0] for call in self.calls):
            return self.dim_names(self.statement(parts[0], target.position), parts[1])[1]
        if len(parts) == 2 and parts[1] in ("outer", "inner"):
            name = f"{parts[0]}_{parts[1]}"
            return self.unsplit.get(name) or name  # an unsplit loop's outer part is the loop
        if len(parts) == 1:
            return parts[0]
        raise self.fail(f"{target} is not a loop", target.position)


def _covers(access: Access, loops: list[For], shape: tuple[int, ...]) -> bool:
    """Whether the boxes of `access` over `loops` are the whole tensor of `shape`, each element in one
    iteration of the loops that index it: every axis is the primitive's in full, or a loop running
    over it with step 1."""
    bounds = {loop.var: (loop.start, loop.stop) for loop in loops}
    used = []
    for start, extent, dim, size in zip(access.starts, access.extents, access.dims, shape, strict=True):
        if dim is not None or size == 1 and start == ex.Const(0):
            if start != ex.Const(0) or extent != size:
                return False
        elif not (isinstance(start, ex.Var) and start.name in bounds
                  and bounds[start.name] == (ex.Const(0), ex.Const(size)) and extent == 1):
            return False
        else:
            used.append(start.name)
    return len(used) == len(set(used))  # loops that index nothing reduce (a map has none: `check_writes_once`)


def _arguments(signature: Primitive) -> tuple[str, ...]:
    return signature.dims + signature.roles + ((signature.constant,) if signature.constant else ())


def _names(node: ast.Expression) -> set[str]:
    """The names an expression uses (an explicit walk: a long sum is a deep chain)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.BinaryOp):
            stack += (node.left, node.right)
        elif isinstance(node, ast.Negate):
            stack.append(node.operand)
        elif isinstance(node, ast.Function):
            stack += node.args
    return names


def _show(value: int) -> str:
    """An integer for a message: in full up to 24 digits, else its order of magnitude (printing a
    number of more than 4300 digits is an error in Python)."""
    if abs(value) < 10**24:
        return str(value)
    return f"{'-' if value < 0 else ''}about 2**{abs(value).bit_length() - 1}"


def _show_expr(expr: ex.Expr, limit: int = 40) -> str:
    """An IR expression for a message, or 'this expression' when it has more than `limit` nodes
    (printing recurses over its depth, and a long one says nothing the caret does not)."""
    nodes, stack = 0, [expr]
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > limit:
            return "(this expression)"
        if isinstance(node, ex.BinOp):
            stack += (node.left, node.right)
    return str(expr)


def ast_position(node: ast.Expression) -> Position:
    return node.position


Layouts = Mapping[str, Sequence[str | int]]  # tensor -> its declared axes in memory order, by name or index


def check(operator: ast.Operator, source: Source, params: Mapping[str, object] | None = None,
          layouts: Layouts | None = None) -> BoundOperator:
    """Check `operator` and bind `params`; raise CheckError / ParameterError on the first problem.
    `layouts` pins tensors to one of the memory layouts their schedule allows (`pin_layouts`)."""
    checker = _Checker(operator, source)
    bound = checker.bind_params(params or {})
    checker.check_lets()
    checker.check_requires()
    checker.check_tensors()
    body, nests = checker.seed()
    checker.calls = [call for _, call, _ in nests]
    checker.loops = [loops for _, _, loops in nests]
    checker.seeds = [body_call(body) for body, _, _ in nests]
    checker.nests = [body for body, _, _ in nests]
    written = {call.output.name for call in checker.seeds}
    tensors = tuple(Tensor(t.name, checker.sizes_of(t), "float32", t.name in written and not t.local, is_local=t.local)
                    for t in operator.tensors)
    space = pin_layouts(checker.schedule(checker.seeds), operator, layouts or {})
    return BoundOperator(operator.name, source, bound, Module(operator.name, tensors, (), body), space)


def pin_layouts(space: ScheduleSpace, operator: ast.Operator, layouts: Layouts) -> ScheduleSpace:
    """`space` with each tensor of `layouts` held in the one memory layout given (its declared axes in
    memory order, by name or by index): what a caller whose arrays are already arranged needs, such as
    a network passing one layer's output to the next. The layout must be one the schedule allows (a
    `layout` directive's choice, or the declared order); an `ArgumentError` names them otherwise."""
    declared = {t.name: t for t in operator.tensors if not t.local}
    choices = {choice.tensor: choice for choice in space.layouts}
    for name, order in layouts.items():
        tensor = declared.get(name)
        if tensor is None:
            raise ArgumentError(f"{operator.name} has no tensor {name} to lay out; its tensors are "
                                f"{', '.join(declared)}")
        axes = [axis.id if isinstance(axis, ast.Name) else str(index) for index, axis in enumerate(tensor.shape)]
        allowed = choices[name].permutations if name in choices else (tuple(range(len(axes))),)
        shown = " or ".join("[" + ", ".join(axes[i] for i in permutation) + "]" for permutation in allowed)
        try:
            order = order.replace(",", " ").split() if isinstance(order, str) else list(order)
            permutation = tuple(item if type(item) is int else axes.index(item) for item in order)
        except (TypeError, ValueError):  # not a sequence, or not of the axes
            permutation = ()
        if permutation not in allowed:
            raise ArgumentError(f"{name} cannot be laid out as {order}: {operator.name}'s schedule keeps it as "
                                f"{shown}")
        if name in choices:  # else the declared order, the only one
            choices[name] = LayoutChoice(name, (permutation,))
    return replace(space, layouts=tuple(choices.values())) if layouts else space


def body_call(stmt: Stmt) -> Call:
    """The primitive call at the bottom of a perfect loop nest."""
    while isinstance(stmt, For):
        stmt = stmt.body
    assert isinstance(stmt, Call)
    return stmt
