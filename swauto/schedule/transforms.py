"""Loop transforms on the statements of a module, each a perfect loop nest around one primitive call.
Each is a pure `Module -> Module`; those that change one nest take its index (`statement`).

Sizes that a split does not divide stay exact: the last tile's extent is `min(factor, rest)`, an
expression of the outer loop's iterator; the `peel_boundaries` pass turns those into constants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from swauto.errors import Rejected
from swauto.ir import expr as ex
from swauto.ir.nests import Nest, loop_nest, rebuild_nest, replace_statements, statements
from swauto.ir.nodes import Access, Call, For, Module

Size = int | ex.Expr


def size(value: ex.Expr | int) -> Size:
    """An int when the value is constant, else the expression."""
    value = ex.as_expr(value)
    return value.value if isinstance(value, ex.Const) else value


def _change(module: Module, statement: int, change: Callable[[list[For], Call], Nest]) -> Module:
    """The module with nest number `statement` rebuilt from `change(loops, call)`."""
    nests = statements(module)
    nests[statement] = rebuild_nest(*change(*loop_nest(nests[statement])))
    return replace_statements(module, nests)


def nest_of_loop(module: Module, var: str) -> int:
    """The index of the nest that has loop `var`."""
    return next(index for index, nest in enumerate(statements(module))
                if any(loop.var == var for loop in loop_nest(nest)[0]))


def _tile(count: int, factor: int, outer: ex.Expr) -> Size:
    """Extent of tile number `outer` when `count` elements are cut in tiles of `factor`."""
    return factor if count % factor == 0 else size(ex.minimum(factor, ex.as_expr(count) - outer * factor))


def split_primitive(module: Module, dim: str, factor: int, loop: str, statement: int = 0) -> Module:
    """Tile primitive dimension `dim` of nest `statement` by `factor`: a new innermost loop `loop`
    walks the tiles and the call works on one tile (the last one shorter when `factor` does not
    divide the dimension)."""
    return _change(module, statement, lambda loops, call: _split_primitive(loops, call, dim, factor, loop))


def _split_primitive(loops: list[For], call: Call, dim: str, factor: int, loop: str) -> Nest:
    total = call.size(dim)
    assert isinstance(total, int), "split a primitive dimension before fusing loops into it"
    outer = ex.Var(loop)
    extent = _tile(total, factor, outer)

    def tile(access: Access) -> Access:
        starts, extents = list(access.starts), list(access.extents)
        for axis, carried in enumerate(access.dims):
            if carried == dim:
                starts[axis] = starts[axis] + outer * factor
                extents[axis] = extent
        return replace(access, starts=tuple(starts), extents=tuple(extents))

    tiled = call.with_operands(lambda _, access: tile(access)).with_sizes({dim: extent})
    return [*loops, For(loop, ex.Const(0), ex.Const(-(-total // factor)), 1, tiled)], tiled


def _substitute(access: Access, mapping: dict[str, ex.Expr]) -> Access:
    return replace(access, starts=tuple(ex.substitute(s, mapping) for s in access.starts),
                   extents=tuple(size(ex.substitute(ex.as_expr(e), mapping)) for e in access.extents))


def substitute_call(call: Call, mapping: dict[str, ex.Expr]) -> Call:
    """`call` with loop variables replaced in its operands' starts and extents and in its sizes."""
    call = call.with_operands(lambda _, access: _substitute(access, mapping))
    call = call.with_sizes({dim: size(ex.substitute(ex.as_expr(value), mapping)) for dim, value in call.sizes})
    if call.epilogue:
        call = replace(call, epilogue=tuple(substitute_call(consumer, mapping) for consumer in call.epilogue))
    return call


def substitute_loops(loops: list[For], mapping: dict[str, ex.Expr]) -> list[For]:
    """`loops` with variables replaced in their bounds (bodies are rebuilt by the caller)."""
    return [replace(loop, start=ex.substitute(loop.start, mapping), stop=ex.substitute(loop.stop, mapping))
            for loop in loops]


def split_loop(module: Module, var: str, factor: int, outer: str, inner: str) -> Module:
    """Split loop `var` into `outer` (over blocks of `factor`) and `inner` (within a block, shorter in
    the last block when `factor` does not divide the trip count); `var` becomes `outer*factor + inner`."""
    return _change(module, nest_of_loop(module, var),
                   lambda loops, call: _split_loop(loops, call, var, factor, outer, inner))


def _split_loop(loops: list[For], call: Call, var: str, factor: int, outer: str, inner: str) -> Nest:
    index = next(i for i, loop in enumerate(loops) if loop.var == var)
    loop = loops[index]
    start, stop = ex.constant_value(loop.start), ex.constant_value(loop.stop)
    assert start is not None and stop is not None and loop.stride == 1, "split a loop with constant bounds"
    count = stop - start
    mapping = {var: ex.Var(outer) * factor + ex.Var(inner) + start}
    split = [
        For(outer, ex.Const(0), ex.Const(-(-count // factor)), 1, call),
        For(inner, ex.Const(0), ex.as_expr(_tile(count, factor, ex.Var(outer))), 1, call),
    ]
    return substitute_loops([*loops[:index], *split, *loops[index + 1 :]], mapping), substitute_call(call, mapping)


def fuse_into_primitive(module: Module, var: str, dim: str, statement: int | None = None) -> Module:
    """Fuse loop `var` into primitive dimension `dim`: each operand indexed by `var` gains, on that
    axis, a range carrying `dim` (before or after the axes already carrying it, the same side in
    every operand), and `dim` grows by the loop's trip count. Raises `Rejected` when the operands'
    boxes would not be DMA boxes."""
    nest = nest_of_loop(module, var) if statement is None else statement
    return _change(module, nest, lambda loops, call: _fuse_into_primitive(loops, call, var, dim))


def _fuse_into_primitive(loops: list[For], call: Call, var: str, dim: str) -> Nest:
    loop = next(loop for loop in loops if loop.var == var)
    assert ex.constant_value(loop.start) == 0 and loop.stride == 1, "fuse loops that start at 0"
    extent = size(loop.stop)

    def fuse(role: str, access: Access) -> Access:
        axes = [axis for axis, start in enumerate(access.starts) if var in ex.free_vars(start)]
        if not axes:
            if dim in access.dims:
                raise Rejected("fusion not expressible", f"{access.name} carries {dim} but does not use {var}")
            return access
        if dim not in access.dims:
            raise Rejected("fusion not expressible", f"{access.name} uses {var} but does not carry {dim}")
        if len(axes) > 1:
            raise Rejected("fusion not expressible", f"{var} indexes several axes of {access.name}")
        (axis,) = axes
        form = ex.linear_form(access.starts[axis])
        step = 1 if form is None else form[0].get(var, 0)
        if extent != 1 and (form is None or step < 1 or step > 1 and role == call.output_role):
            # A transfer gathers an input's axis at any positive step; an output stays dense.
            raise Rejected("fusion not expressible", f"{var} strides through axis {axis} of {access.name}")
        carriers = [a for a, d in enumerate(access.dims) if d == dim]
        side = "outer" if axis < carriers[0] else "inner" if axis > carriers[-1] else None
        if side is None or access.dims[axis] == dim:
            raise Rejected("fusion not expressible", f"axis {axis} of {access.name} is not outside its {dim} axes")
        sides.add(side)
        starts = list(access.starts)
        starts[axis] = ex.substitute(starts[axis], {var: ex.Const(0)})
        extents, dims = list(access.extents), list(access.dims)
        steps = list(access.steps or (1,) * len(extents))
        walks = list(access.walks or range(len(extents)))
        carried = access.dims[axis]
        # A one-long digit of a dimension that other axes carry too leaves the axis free for `dim`.
        free = carried is None or access.extents[axis] == 1 and access.dims.count(carried) > 1
        if carried is not None and extent == 1:
            pass  # a loop of one trip: nothing joins `dim`, the axis keeps the dimension it carries
        elif free:
            extents[axis], dims[axis] = extent, dim
            steps[axis] = step if extent != 1 else 1  # a strided input: its transfer gathers every step-th index
        else:
            # The axis carries another dimension already (output columns in M): a new axis beside it,
            # on the side of `dim`'s axes, walks the same tensor axis (a window: the input's columns as
            # columns x taps). An output is never a window: its tiles must not overlap.
            if role == call.output_role or access.pad:
                raise Rejected("fusion not expressible", f"{var} indexes axis {axis} of {access.name}, which "
                                                         f"carries {carried}")
            axis += side == "outer"
            starts.insert(axis, ex.Const(0))
            extents.insert(axis, extent)
            dims.insert(axis, dim)
            steps.insert(axis, step)
            walks.insert(axis, walks[axis - (side == "outer")])
        return replace(access, starts=tuple(starts), extents=tuple(extents), dims=tuple(dims),
                       steps=tuple(steps) if any(s != 1 for s in steps) else (),
                       walks=tuple(walks) if walks != list(range(len(walks))) else ())

    # The loop's index becomes the outer digit of `dim` where its axis comes before the axes carrying
    # `dim`, the inner digit where it comes after: every operand must agree.
    sides: set[str] = set()
    fused = call.with_operands(fuse)
    if len(sides) > 1:
        raise Rejected("fusion not expressible", f"{var} would be the outer digit of {dim} in one operand and the "
                                                 "inner one in another")
    fused = fused.with_sizes({dim: ex.as_expr(call.size(dim)) * ex.as_expr(extent)})
    return [other for other in loops if other.var != var], fused


def fuse_loops(module: Module, outer: str, inner: str, fused: str) -> Module:
    """Fuse loop `outer` with the loop `inner` directly inside it into one loop `fused`."""
    return _change(module, nest_of_loop(module, outer),
                   lambda loops, call: _fuse_loops(loops, call, outer, inner, fused))


def _fuse_loops(loops: list[For], call: Call, outer: str, inner: str, fused: str) -> Nest:
    index = next(i for i, loop in enumerate(loops) if loop.var == outer)
    if index + 1 >= len(loops) or loops[index + 1].var != inner:
        raise Rejected("fusion not expressible", f"loop {inner} is not directly inside {outer}")
    first, second = loops[index], loops[index + 1]
    counts = [ex.constant_value(loop.stop - loop.start) for loop in (first, second)]
    if None in counts or first.stride != 1 or second.stride != 1:
        raise Rejected("fusion not expressible", f"loops {outer} and {inner} must have constant bounds")
    count_outer, count_inner = counts
    # A shorter last tile of either loop becomes a size that changes in the middle of the fused loop,
    # where no peeling of its last iteration makes it constant.
    sizes = [e for loop in loops[index + 2:] for e in (loop.start, loop.stop)]
    sizes += [ex.as_expr(value) for _, value in call.sizes]
    sizes += [ex.as_expr(e) for _, access in call.operands for e in access.extents]
    if any({outer, inner} & ex.free_vars(e) for e in sizes):
        raise Rejected("fusion not expressible", f"{outer} or {inner} has a shorter last tile")
    f = ex.Var(fused)
    mapping = {outer: f // count_inner + first.start, inner: f % count_inner + second.start}
    new_loops = [*loops[:index], For(fused, ex.Const(0), ex.Const(count_outer * count_inner), 1, call),
                 *loops[index + 2 :]]
    return substitute_loops(new_loops, mapping), substitute_call(call, mapping)


def reorder(module: Module, order: tuple[str, ...]) -> Module:
    """Permute the loops of each nest into the order they have in `order` (outermost first; `order`
    lists every loop of every nest). Legal for any order whose loop bounds only use loops outside
    them: a primitive that combines into its output (a sum, a maximum) gives the same result in any
    order, and a nest around one that stores has every loop index its output (the front end checks),
    so its iterations write disjoint tiles."""
    nests = []
    for nest in statements(module):
        loops, call = loop_nest(nest)
        by_name = {loop.var: loop for loop in loops}
        seen: set[str] = set()
        for name in (name for name in order if name in by_name):
            loop = by_name[name]
            used = ex.free_vars(loop.start) | ex.free_vars(loop.stop)
            if not used <= seen:
                raise Rejected("loop bounds depend on an inner loop", f"{name} needs {', '.join(sorted(used - seen))}")
            seen.add(name)
        nests.append(rebuild_nest([by_name[name] for name in order if name in by_name], call))
    return replace_statements(module, nests)


def drop_single_trip_loops(module: Module, statement: int = 0) -> Module:
    """Replace each loop of nest `statement` that runs exactly once (a tile as large as its dimension)
    by its body at that iteration: the loop variable becomes the loop's start everywhere inside.
    The same iterations in the same order, so always legal; it keeps loops of one iteration out of
    the IR, the passes and the generated code."""
    return _change(module, statement, _drop_single_trip_loops)


def _drop_single_trip_loops(loops: list[For], call: Call) -> Nest:
    kept: list[For] = []
    mapping: dict[str, ex.Expr] = {}
    for loop in loops:
        loop = substitute_loops([loop], mapping)[0] if mapping else loop
        span = ex.constant_value(loop.stop - loop.start)
        if span is not None and 0 < span <= loop.stride:
            mapping[loop.var] = loop.start
        else:
            kept.append(loop)
    return kept, substitute_call(call, mapping) if mapping else call


def set_layout(module: Module, tensor_name: str, permutation: tuple[int, ...]) -> Module:
    """Store tensor `tensor_name` with its declared axes in `permutation` order (memory axis i is
    declared axis permutation[i]); every access to it follows."""
    if permutation == tuple(range(len(permutation))):
        return module
    tensor = module.tensor(tensor_name)

    position = {declared: memory for memory, declared in enumerate(permutation)}

    def permute(_: str, access: Access) -> Access:
        if access.name != tensor_name:
            return access
        # The box's axes follow the memory order of the axes they walk (a window's walk one twice).
        order = sorted(range(len(access.starts)), key=lambda a: position[access.walked(a)])
        return replace(
            access,
            starts=tuple(access.starts[a] for a in order),
            extents=tuple(access.extents[a] for a in order),
            dims=tuple(access.dims[a] for a in order),
            steps=tuple(access.steps[a] for a in order) if access.steps else (),
            walks=tuple(position[access.walks[a]] for a in order) if access.walks else (),
        )

    stored = replace(tensor, shape=tuple(tensor.shape[a] for a in permutation), layout=permutation)
    tensors = tuple(stored if t.name == tensor_name else t for t in module.tensors)
    nests = [rebuild_nest(loops, call.with_operands(permute)) for loops, call in map(loop_nest, statements(module))]
    return replace_statements(replace(module, tensors=tensors), nests)


def vectorize(module: Module, dim: str, statement: int = 0) -> Module:
    """Choose the free dimension the primitive of nest `statement` vectorizes."""
    return _change(module, statement, lambda loops, call: (loops, replace(call, vectorize=dim)))


def loop_order(module: Module) -> tuple[str, ...]:
    """Every loop of every nest, nest by nest, outermost first."""
    return tuple(loop.var for nest in statements(module) for loop in loop_nest(nest)[0])
