"""Check a parsed operator and bind its size parameters: the result is the seed IR and its space.

Everything a user can get wrong in a `.sw` file is reported here, at its position: unknown or
duplicate names, ranks, non-affine or out-of-range indices, primitive arguments, schedule targets.
"""

from __future__ import annotations

import math
import operator as op
from collections.abc import Mapping
from dataclasses import dataclass

from swauto.errors import CheckError, ParameterError
from swauto.frontend import ast
from swauto.frontend.integers import MAX_ELEMENTS, MAX_SIZE, check_integer
from swauto.frontend.source import Position, Source
from swauto.ir import expr as ex
from swauto.ir.nodes import Access, For, Gemm, Module, Stmt, Tensor
from swauto.primitives import PRIMITIVES, PrimitiveSignature


@dataclass(frozen=True)
class SplitChoice:
    """Split a loop (`target` is its IR name) or a primitive dimension (`target` is 'M', 'N' or 'K')."""

    target: str
    on_primitive: bool
    factors: tuple[int, ...]
    outer: str  # IR name of the loop over tiles
    inner: str | None  # IR name of the loop inside a tile (None for a primitive dimension: it stays in the call)


@dataclass(frozen=True)
class FuseChoice:
    """Fuse loop `loop` into primitive dimension `into_dim`, or with the loop `with_loop` into one
    loop named `fused` (both IR names)."""

    loop: str
    into_dim: str | None = None
    with_loop: str | None = None
    fused: str | None = None


@dataclass(frozen=True)
class LayoutChoice:
    """The memory layouts a tensor may take: each lists the declared axes in memory order."""

    tensor: str
    permutations: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ScheduleSpace:
    """The choices of a schedule block, resolved to IR names. The space is their product."""

    splits: tuple[SplitChoice, ...]
    order: tuple[str, ...] | None  # a given loop order, or None with `reorder_any`
    reorder_any: bool
    vectorize: tuple[str, ...]
    fuses: tuple[FuseChoice, ...] = ()
    layouts: tuple[LayoutChoice, ...] = ()
    loops: tuple[str, ...] = ()  # the loops after splits and fusions, in their default order


@dataclass(frozen=True)
class BoundOperator:
    """A checked operator with its parameters bound: the seed as IR, and the space to explore."""

    name: str
    source: Source
    params: dict[str, int]
    seed: Module
    space: ScheduleSpace
    primitive: PrimitiveSignature


class _Checker:
    def __init__(self, operator: ast.Operator, source: Source) -> None:
        self.operator = operator
        self.source = source
        self.sizes: dict[str, int] = {}
        self.size_exprs: dict[str, ex.Expr] = {}  # symbolic: lets expanded over parameter names
        self.tensors: dict[str, ast.TensorDecl] = {}

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

    def check_tensors(self) -> None:
        for tensor in self.operator.tensors:
            self.declare(tensor.name, tensor.position, "tensor")
            elements = math.prod(self.size(axis, f"axis of tensor {tensor.name}") for axis in tensor.shape)
            if elements > MAX_ELEMENTS:
                raise self.fail(f"tensor {tensor.name} has {_show(elements)} elements for these parameters; "
                                f"a tensor may have at most {MAX_ELEMENTS} (2**40)", tensor.position)
            self.tensors[tensor.name] = tensor

    # --- the compute seed ---------------------------------------------------------------------

    def seed(self) -> tuple[Stmt, ast.Call, list[ast.ForLoop]]:
        loops: list[ast.ForLoop] = []
        statements = self.operator.compute
        while True:
            if len(statements) != 1:
                position = statements[1].position if statements else self.operator.position
                raise self.fail(
                    "the compute block must be a perfect loop nest around exactly one primitive call",
                    position,
                )
            (statement,) = statements
            if isinstance(statement, ast.Call):
                break
            self.declare(statement.var, statement.position, "name")
            if any(loop.var == statement.var for loop in loops):
                raise self.fail(f"loop variable {statement.var} is already used by an outer loop",
                                statement.position)
            loops.append(statement)
            statements = statement.body
        ranges: dict[str, tuple[int, int]] = {}
        for loop in loops:
            start = self.expression(loop.start, ranges)
            stop = self.expression(loop.stop, ranges)
            if not (isinstance(start, ex.Const) and isinstance(stop, ex.Const)):
                raise self.fail(f"the bounds of loop {loop.var} must be size expressions", loop.position)
            if max(abs(start.value), abs(stop.value)) > MAX_SIZE:
                raise self.fail(f"loop {loop.var} runs {_show(start.value)}..{_show(stop.value)}; loop bounds "
                                f"must be at most {MAX_SIZE} in magnitude", loop.position)
            if stop.value <= start.value:
                raise self.fail(
                    f"loop {loop.var} runs {start.value}..{stop.value}, which is empty for these parameters",
                    loop.position,
                )
            ranges[loop.var] = (start.value, stop.value - 1)
        body: Stmt = self.call(statement, ranges)
        for loop in reversed(loops):
            lo, hi = ranges[loop.var]
            body = For(loop.var, ex.Const(lo), ex.Const(hi + 1), 1, body)
        return body, statement, loops

    def call(self, call: ast.Call, ranges: Mapping[str, tuple[int, int]]) -> Gemm:
        signature = PRIMITIVES.get(call.primitive)
        if signature is None:
            known = ", ".join(sorted(PRIMITIVES))
            raise self.fail(f"unknown primitive {call.primitive}; swauto knows {known}", call.position)
        arguments: dict[str, ast.Argument] = {}
        for argument in call.arguments:
            if argument.name not in signature.arguments:
                raise self.fail(
                    f"{call.primitive} has no argument {argument.name}; "
                    f"it takes {', '.join(signature.arguments)}",
                    argument.position,
                )
            if argument.name in arguments:
                raise self.fail(f"argument {argument.name} is given twice", argument.position)
            arguments[argument.name] = argument
        missing = [name for name in signature.arguments if name not in arguments]
        if missing:
            raise self.fail(f"{call.primitive} needs argument {missing[0]}", call.position)
        sizes: dict[str, int] = {}
        symbolic: dict[str, ex.Expr] = {}
        for name in signature.sizes:
            value = arguments[name].value
            if isinstance(value, ast.Slice):
                raise self.fail(f"{name} must be a size expression, not a tensor slice", value.position)
            for var in ranges:
                if var in _names(value):
                    raise self.fail(f"{call.primitive}'s {name} must not depend on loop {var}",
                                    ast_position(value))
            sizes[name] = self.size(value, f"{call.primitive}'s {name}")
            symbolic[name] = self.expression(value, symbolic=True)
        operands = {
            name: self.operand(arguments[name], dims, sizes, symbolic, ranges, name in signature.outputs)
            for name, dims in signature.operands
        }
        written = {operands[name].name for name in signature.outputs}
        for name, _ in signature.operands:
            if name not in signature.outputs and operands[name].name in written:
                raise self.fail(
                    f"tensor {operands[name].name} is both read as {name} and written; "
                    f"swauto does not compute in place",
                    arguments[name].position,
                )
        return Gemm(sizes["M"], sizes["N"], sizes["K"], operands["A"], operands["B"], operands["C"])

    def operand(self, argument: ast.Argument, dims: tuple[str, ...], sizes: Mapping[str, int],
                symbolic: Mapping[str, ex.Expr], ranges: Mapping[str, tuple[int, int]], writes: bool) -> Access:
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
        for axis, index in enumerate(value.indices):
            if isinstance(index, ast.DimIndex):
                if index.dim not in dims:
                    raise self.fail(f"operand {argument.name} carries {' and '.join(dims)}, not {index.dim}",
                                    index.position)
                if index.dim in axis_dims:
                    raise self.fail(f"dimension {index.dim} is given twice", index.position)
                axis_dims[axis] = index.dim
                continue
            start = self.expression(index, ranges)
            if ex.linear_form(start) is None:
                raise self.fail(f"index {_show_expr(start)} is not affine in the loop variables", ast_position(index))
            low, high = ex.bounds(start, ranges)
            extent = self.sizes_of(tensor)[axis]
            if (low < 0 or high >= extent) and (writes or not tensor.padded):
                hint = "" if writes else f" (declare `tensor {tensor.name}[...] padded` to read zeros there)"
                raise self.fail(
                    f"index {_show_expr(start)} of tensor {tensor.name} axis {axis} takes values "
                    f"{_show(low)}..{_show(high)}, "
                    f"outside 0..{extent - 1}{hint}",
                    ast_position(index),
                )
            starts[axis] = start
        free = [d for d in dims if d not in axis_dims]
        for axis in open_axes:
            axis_dims[axis] = self.match_dim(tensor, axis, free, sizes, symbolic, value.position)
            free.remove(axis_dims[axis])
        if free:
            raise self.fail(
                f"operand {argument.name} must carry dimensions {' and '.join(dims)}; "
                f"{value.tensor} leaves no axis for {free[0]} (write :{free[0]} at that axis)",
                value.position,
            )
        extents = []
        for axis, dim in enumerate(axis_dims):
            extent = self.sizes_of(tensor)[axis]
            if dim is not None and extent != sizes[dim]:
                raise self.fail(
                    f"axis {axis} of tensor {tensor.name} has {extent} elements but the primitive's {dim} "
                    f"is {sizes[dim]}",
                    value.position,
                )
            extents.append(1 if dim is None else extent)
        return Access(tensor.name, tuple(starts), tuple(extents), tuple(axis_dims))

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

    def schedule(self, call: ast.Call, loops: list[ast.ForLoop], signature: PrimitiveSignature,
                 seed_call: Gemm) -> ScheduleSpace:
        loop_names = [loop.var for loop in loops]
        splits: list[SplitChoice] = []
        fuses: list[tuple[FuseChoice, ast.Fuse]] = []
        layouts: list[LayoutChoice] = []
        reorders = [d for d in self.operator.schedule if isinstance(d, ast.Reorder)]
        vectorizes = [d for d in self.operator.schedule if isinstance(d, ast.Vectorize)]
        for extra in (reorders[1:2], vectorizes[1:2]):
            for directive in extra:
                word = "reorder" if isinstance(directive, ast.Reorder) else "vectorize"
                raise self.fail(f"the schedule has two {word} directives", directive.position)
        for directive in self.operator.schedule:
            if isinstance(directive, ast.Split):
                splits.append(self.split(directive, call, loop_names, splits))
            elif isinstance(directive, ast.Fuse):
                fuses.append((self.fuse(directive, call, signature), directive))
            elif isinstance(directive, ast.Layout):
                if any(layout.tensor == directive.tensor for layout in layouts):
                    raise self.fail(f"tensor {directive.tensor} has two layout directives", directive.position)
                layouts.append(self.layout(directive, seed_call))
        vectorize = signature.vectorizable
        if vectorizes:
            directive = vectorizes[0]
            if directive.primitive != call.primitive:
                raise self.fail(f"the compute block calls {call.primitive}, not {directive.primitive}",
                                directive.position)
            for dim in directive.dims:
                if dim not in signature.vectorizable:
                    raise self.fail(
                        f"{call.primitive} can be vectorized over {' or '.join(signature.vectorizable)}, not {dim}",
                        directive.position,
                    )
            vectorize = tuple(dict.fromkeys(directive.dims))
        all_loops = list(loop_names)
        for split in splits:
            if split.on_primitive:
                all_loops.append(split.outer)
            else:
                index = all_loops.index(split.target)
                all_loops[index : index + 1] = [split.outer, split.inner]  # type: ignore[list-item]
        if len(set(all_loops)) != len(all_loops):
            duplicate = next(name for name in all_loops if all_loops.count(name) > 1)
            raise self.fail(f"a split creates loop {duplicate}, which already exists", self.operator.position)
        for fuse, directive in fuses:
            for name in (fuse.loop, fuse.with_loop):
                if name is not None and name not in all_loops:
                    known = f"the loops are {', '.join(all_loops)}" if all_loops else "the nest has no loops"
                    raise self.fail(f"no loop {name} to fuse; {known}", directive.position)
            if fuse.into_dim is not None:
                all_loops.remove(fuse.loop)
            else:
                assert fuse.with_loop is not None and fuse.fused is not None
                all_loops.remove(fuse.with_loop)
                all_loops[all_loops.index(fuse.loop)] = fuse.fused
        order = None
        if reorders and reorders[0].order is not None:
            order = tuple(self.loop_target(t, call) for t in reorders[0].order)
            if sorted(order) != sorted(all_loops):
                if not all_loops:
                    raise self.fail("there are no loops to reorder (split a dimension first)", reorders[0].position)
                raise self.fail(f"reorder must list every loop exactly once: {', '.join(all_loops)}",
                                reorders[0].position)
        reorder_any = bool(reorders) and reorders[0].order is None
        return ScheduleSpace(tuple(splits), order, reorder_any, vectorize, tuple(f for f, _ in fuses), tuple(layouts),
                             tuple(all_loops))

    def fuse(self, directive: ast.Fuse, call: ast.Call, signature: PrimitiveSignature) -> FuseChoice:
        loop = self.loop_target(directive.source, call)
        if not directive.into_primitive:
            other = self.loop_target(directive.into, call)
            if other == loop:
                raise self.fail(f"cannot fuse loop {directive.source} with itself", directive.into.position)
            return FuseChoice(loop, with_loop=other, fused=f"{loop}_{other}")
        parts = directive.into.parts
        if len(parts) != 2 or parts[0] != call.primitive or parts[1] not in signature.sizes:
            dims = ", ".join(f"{call.primitive}.{size}" for size in signature.sizes)
            raise self.fail(f"cannot fuse into {directive.into}: expected one of {dims}", directive.into.position)
        return FuseChoice(loop, into_dim=parts[1])

    def layout(self, directive: ast.Layout, seed_call: Gemm) -> LayoutChoice:
        tensor = self.tensors.get(directive.tensor)
        if tensor is None:
            raise self.fail(f"unknown tensor {directive.tensor}", directive.position)
        names = [axis.id if isinstance(axis, ast.Name) else None for axis in tensor.shape]
        if None in names or len(set(names)) != len(names):
            raise self.fail(
                f"a layout names the axes of {tensor.name} by their declared sizes, which must be distinct names",
                directive.position,
            )
        # Axes indexed by loops stay in front, in order: only the primitive's axes may be permuted.
        accesses = [access for _, access in seed_call.operands if access.name == tensor.name]
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

    def split(self, directive: ast.Split, call: ast.Call, loops: list[str], done: list[SplitChoice]) -> SplitChoice:
        parts = directive.target.parts
        factors = tuple(sorted(set(directive.factors)))
        if any(f <= 0 for f in factors):
            raise self.fail("split factors must be positive", directive.position)
        if any(s.target == self.split_target(parts, call, loops, directive) for s in done):
            raise self.fail(f"{directive.target} is split twice", directive.position)
        target = self.split_target(parts, call, loops, directive)
        if len(parts) == 2:
            return SplitChoice(target, True, factors, f"{target}_outer", None)
        return SplitChoice(target, False, factors, f"{target}_outer", f"{target}_inner")

    def split_target(self, parts: tuple[str, ...], call: ast.Call, loops: list[str], d: ast.Split) -> str:
        if len(parts) == 1:
            if parts[0] not in loops:
                raise self.fail(f"no loop named {parts[0]} to split", d.target.position)
            return parts[0]
        signature = PRIMITIVES[call.primitive]
        if len(parts) != 2 or parts[0] != call.primitive or parts[1] not in signature.sizes:
            dims = ", ".join(f"{call.primitive}.{s}" for s in signature.sizes)
            raise self.fail(f"cannot split {d.target}: expected a loop name or one of {dims}", d.target.position)
        return parts[1]

    def loop_target(self, target: ast.Target, call: ast.Call) -> str:
        parts = target.parts
        if parts[0] == call.primitive and len(parts) == 3 and parts[2] == "outer":
            return f"{parts[1]}_outer"
        if len(parts) == 2 and parts[1] in ("outer", "inner"):
            return f"{parts[0]}_{parts[1]}"
        if len(parts) == 1:
            return parts[0]
        raise self.fail(f"{target} is not a loop", target.position)


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


def check(operator: ast.Operator, source: Source, params: Mapping[str, object] | None = None) -> BoundOperator:
    """Check `operator` and bind `params`; raise CheckError / ParameterError on the first problem."""
    checker = _Checker(operator, source)
    bound = checker.bind_params(params or {})
    checker.check_lets()
    checker.check_tensors()
    body, call, loops = checker.seed()
    signature = PRIMITIVES[call.primitive]
    outputs = {getattr(body_gemm(body), name.lower()).name for name in signature.outputs}
    tensors = tuple(
        Tensor(t.name, checker.sizes_of(t), "float32", t.name in outputs) for t in operator.tensors
    )
    space = checker.schedule(call, loops, signature, body_gemm(body))
    return BoundOperator(operator.name, source, bound, Module(operator.name, tensors, (), body), space, signature)


def body_gemm(stmt: Stmt) -> Gemm:
    """The primitive call at the bottom of a perfect loop nest."""
    while isinstance(stmt, For):
        stmt = stmt.body
    assert isinstance(stmt, Gemm)
    return stmt
