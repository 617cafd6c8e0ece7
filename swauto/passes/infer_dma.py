"""DMA inference (thesis algorithm 7).

Guarantees: after this pass every primitive operand is a box of a local buffer. For each operand
box of a tensor, a local buffer is allocated at the root, and a `dma get` (then a wait) is placed
as the leftmost child of the innermost loop whose iterator the box's address depends on (when it
depends on none: before the statement of the nest's body whose calls use it, the peeled copies of the
outermost loops each opening with its own, or at the root where calls of several share it). For an
output, the same get when the primitive combines into it
(a GEMM, a reduction; none when it only stores its result) and a `dma put` (then a wait) as the
rightmost child of that loop, once every iteration inside it has updated the tile. Calls fused into
a producer (`Call.epilogue`) become statements just before that put, on the tile, their other
inputs transferred like operands (`Call.transfers`). A box that may reach outside its tensor (a
convolution's padding) is zero-filled there; an operand with padding zeros its buffer before the
get. A call left overwriting its output by `init_outputs` has the output tile zeroed in local memory
instead of read, where the tile's transfer sits (outside the loops that only reduce into it), and the
call's flag cleared: it adds into the zeroed tile, and no call overwrites afterwards. A strided
tensor box (`Access.steps`) is gathered into a dense buffer box. The buffers of a GEMM are spread over
the mesh as its blocks; those of other primitives are data-parallel (`LocalBuffer.spread`).

`place_transfers` is the same placement with some operands hoisted over their innermost dependent
loops (the `hoist_dma` pass chooses how far; `call_levels` says how far each call's transfer goes).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from swauto.ir import expr as ex
from swauto.ir.nodes import Access, Alloc, Call, Dma, DmaWait, For, LocalBuffer, Module, Seq, Stmt, Zero, seq
from swauto.ir.visitor import Rewriter, walk


def buffer_names(call: Call) -> dict[str, str]:
    """`{tensor}_tile` per transfer (`Call.transfers`); `{tensor}_{role}_tile` when one tensor feeds two."""
    tensors = [access.name for _, access in call.transfers]
    return {
        operand: f"{access.name}_tile" if tensors.count(access.name) == 1 else f"{access.name}_{operand}_tile"
        for operand, access in call.transfers
    }


@dataclass(frozen=True)
class _Placement:
    home: For | None  # the loop whose body gets the transfer (None: the root)
    before: tuple[Stmt, ...]
    after: tuple[Stmt, ...]
    operand: Access  # the primitive's view of the buffer
    shape: tuple[int, ...]


def hoistable(access: Access, loops: tuple[For, ...]) -> int:
    """How many of the loops a box depends on it can be hoisted over (innermost first): the starts
    they move must be affine and on axes without padding."""
    return _hoistable(access, tuple(loop.var for loop in loops))


@lru_cache(maxsize=1 << 14)  # every candidate asks again about the same boxes in other loop orders
def _hoistable(access: Access, loop_vars: tuple[str, ...]) -> int:
    used = set().union(*(ex.free_vars(s) for s in access.starts))
    deps = [var for var in loop_vars if var in used]
    pads = access.pad or (0,) * len(access.starts)
    count = 0
    for var in reversed(deps):
        moves = [axis for axis, s in enumerate(access.starts) if var in ex.free_vars(s)]
        # A padded axis must stay padded with zeros, not with the neighbouring tiles a hoisted box holds;
        # a strided axis would interleave the tiles of successive iterations.
        if any(ex.linear_form(access.starts[axis]) is None or pads[axis] or access.step(axis) != 1
               for axis in moves):
            break
        count += 1
    return count


@dataclass(frozen=True)
class TransferBox:
    """Where an operand's transfer goes and what it moves: the loop whose body gets it (None: the
    root), the loops it was hoisted over, and the tensor box (starts, extents)."""

    home: For | None
    crossed: tuple[For, ...]
    starts: tuple[ex.Expr, ...]
    extents: tuple[int, ...]


def transfer_box(access: Access, loops: tuple[For, ...], hoist: int) -> TransferBox:
    """The transfer of the operand box `access` inside `loops`, hoisted over `hoist` of the loops it
    depends on (at most `hoistable`): its box grows to cover every iteration of those loops."""
    used = set().union(*(ex.free_vars(s) for s in access.starts))
    deps = [loop for loop in loops if loop.var in used]
    hoist = min(hoist, hoistable(access, loops))
    crossed = tuple(deps[len(deps) - hoist :]) if hoist else ()
    home = deps[len(deps) - hoist - 1] if len(deps) > hoist else None
    starts = list(access.starts)
    forms = _coefficients(access.starts)
    for loop in crossed:
        low, high = ex.evaluate(loop.start, {}), ex.evaluate(loop.stop, {}) - 1
        for axis, form in enumerate(forms):
            coefficient = form.get(loop.var, 0)
            if coefficient:
                starts[axis] = ex.substitute(starts[axis], {loop.var: low if coefficient > 0 else high})
    return TransferBox(home, crossed, tuple(starts), hoisted_extents(access, crossed))


def hoisted_extents(access: Access, crossed: Iterable[For]) -> tuple[int, ...]:
    """The extents of `access`'s box grown to cover every iteration of the loops `crossed` (constant
    bounds): `transfer_box`'s extents, without its starts."""
    extents = list(access.extents)
    forms = _coefficients(access.starts)
    for loop in crossed:
        span = ex.evaluate(loop.stop, {}) - 1 - ex.evaluate(loop.start, {})
        for axis, form in enumerate(forms):
            extents[axis] += abs(form.get(loop.var, 0)) * span
    return tuple(extents)


@lru_cache(maxsize=1 << 14)  # every order of every tile class asks again about the same boxes
def _coefficients(starts: tuple[ex.Expr, ...]) -> tuple[dict[str, int], ...]:
    """Per axis, the coefficient of each loop variable in the start (none where it is not affine)."""
    forms = (ex.linear_form(start) for start in starts)
    return tuple(form[0] if form else {} for form in forms)


def call_levels(calls: list[tuple[Call, tuple[For, ...]]], hoist: Mapping[str, int]) -> list[dict[str, int]]:
    """Per call, how many of its dependent loops each operand's transfer is hoisted over, when `hoist`
    says how many of the deepest call's: every call crosses the same loops, as far as it has them.
    (Peeled copies of a nest lack some of its loops: the copy that runs a loop's last tile is not
    inside that loop, and hoisting it over as many loops of its own would cross outer ones.)"""
    deepest, loops = max(calls, key=lambda entry: len(entry[1]))
    crossed = {}
    for role, access in deepest.transfers:
        deps = _dependent_vars(access, loops)
        crossed[role] = set(deps[len(deps) - hoist.get(role, 0):]) if hoist.get(role, 0) else set()
    levels = []
    for call, loops in calls:
        per_role = {}
        for role, access in call.transfers:
            deps = _dependent_vars(access, loops)
            per_role[role] = next((count for count, var in enumerate(reversed(deps)) if var not in crossed[role]),
                                  len(deps))
        levels.append(per_role)
    return levels


def _dependent_vars(access: Access, loops: tuple[For, ...]) -> list[str]:
    """The loops (outermost first) the box's address depends on."""
    used = set().union(*(ex.free_vars(s) for s in access.starts))
    return [loop.var for loop in loops if loop.var in used]


def place(access: Access, loops: tuple[For, ...], hoist: int, buffer: str, reads: bool, writes: bool,
          tensor_shape: tuple[int, ...], context: tuple[tuple[str, int, int], ...] = (),
          zeroed: bool = False) -> _Placement:
    box = transfer_box(access, loops, hoist)
    starts, extents = box.starts, box.extents
    pad = access.pad or (0,) * len(extents)
    shape = tuple(e + p for e, p in zip(extents, pad, strict=True))
    operand = Access(buffer, tuple(s - n for s, n in zip(access.starts, starts, strict=True)), access.extents,
                     access.dims, access.pad)
    crossed = {loop.var for loop in box.crossed}
    outer = {var: (first, last) for var, first, last in context}
    outer.update({loop.var: (ex.evaluate(loop.start, {}), ex.evaluate(loop.stop, {}) - 1)
                  for loop in loops if loop.var not in crossed})
    tensor_box = Access(access.name, starts, extents, access.dims, steps=access.steps, walks=access.walks)
    around = tensor_box.bounding_box()
    inside = all(
        low >= 0 and high + span <= size
        for (low, high), span, size in zip((ex.bounds(s, outer) for s in around.starts), around.spans(), tensor_shape,
                                           strict=True)
    )
    local_box = Access(buffer, tuple(ex.Const(0) for _ in extents), extents, access.dims)
    ready, written = f"{buffer}_ready", f"{buffer}_written"
    zero = (Zero(Access(buffer, tuple(ex.Const(0) for _ in shape), shape, access.dims)),) if any(pad) or zeroed \
        else ()
    get = Dma("get", tensor_box, local_box, ready, zero_fill=not inside)
    before = (*zero, get, DmaWait(ready)) if reads else zero
    after = (Dma("put", tensor_box, local_box, written), DmaWait(written)) if writes else ()
    return _Placement(box.home, before, after, operand, shape)


def _rename(placement: _Placement, old: str, new: str) -> _Placement:
    """The same placement on buffer `new` instead of `old` (replies follow the buffer's name)."""

    def access(a: Access) -> Access:
        return replace(a, name=new) if a.name == old else a

    def stmt(s: Stmt) -> Stmt:
        if isinstance(s, Dma):
            return replace(s, buffer=access(s.buffer), reply=s.reply.replace(old, new, 1))
        if isinstance(s, DmaWait):
            return DmaWait(s.reply.replace(old, new, 1))
        assert isinstance(s, Zero)
        return Zero(access(s.buffer))

    return replace(placement, before=tuple(map(stmt, placement.before)), after=tuple(map(stmt, placement.after)),
                   operand=access(placement.operand))


def place_transfers(module: Module, hoist: Mapping[str, int] | None = None) -> Module:
    """Algorithm 7, with operand `X` hoisted over its `hoist[X]` innermost dependent loops."""
    segments, calls = nest_calls(module)
    assert calls, "place_transfers expects primitive calls"
    names = buffer_names(calls[0][0])
    call_hoists = call_levels(calls, hoist or {})
    outside: list[tuple[int, str]] = []  # the (call, role) transfers outside every loop
    moves: list[tuple[tuple, int]] = []  # each one's identity and its call's statement
    for index, ((call, loops), levels) in enumerate(zip(calls, call_hoists, strict=True)):
        for role, access in call.transfers:
            box = transfer_box(access, loops, levels[role])
            if box.home is None:
                outside.append((index, role))
                moves.append(((role, box.starts, box.extents, access.pad), segments[index]))
    statement = dict(zip(outside, statements_of_outside_transfers(moves), strict=True))
    # Calls of peeled copies share a buffer only where they share the transfer; a copy whose transfer
    # sits elsewhere gets its own buffer, or one copy's tile would overwrite another's.
    buffers: dict[tuple, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    before: dict[object, list[Stmt]] = {}  # by the loop whose body holds them (its id), a segment, or None
    after: dict[object, list[Stmt]] = {}
    new_calls: dict[int, Call] = {}
    for index, ((call, loops), levels) in enumerate(zip(calls, call_hoists, strict=True)):
        placed: dict[str, _Placement] = {}
        keys: dict[str, object] = {}
        out = call.output_role
        for role, access in call.transfers:
            tensor = module.tensor(access.name)
            writes = role == out
            zeroed = writes and call.overwrite  # the tile starts from 0 in local memory (`init_outputs`)
            reads = not writes or call.signature.reads_output() and not zeroed
            draft = place(access, loops, levels[role], names[role], reads, writes, tensor.shape,
                          module.context, zeroed)
            if draft.home is not None:
                key: object = id(draft.home)
            else:
                key = None if statement[index, role] is None else ("segment", statement[index, role])
            keys[role] = key
            identity = (role, key, draft.before, draft.after)
            if identity not in buffers:
                taken = sum(1 for other in buffers if other[0] == role)
                buffers[identity] = names[role] if taken == 0 else f"{names[role]}_{taken + 1}"
            name = buffers[identity]
            placed[role] = draft if name == names[role] else _rename(draft, names[role], name)
        if call.epilogue:  # fused consumers run on the complete output tile, before its write-back
            tile = replace(placed[out].operand, pad=())

            def operand(role: str, access: Access, index: int, c: Call = call, t: Access = tile,
                        p: dict[str, _Placement] = placed) -> Access:
                return t if access.name == c.output.name else p[f"{c.epilogue[index].primitive}{index}_{role}"].operand

            epilogue = tuple(consumer.with_operands(lambda role, access, i=index: operand(role, access, i))
                             for index, consumer in enumerate(call.epilogue))
            placed[out] = replace(placed[out], after=(*epilogue, *placed[out].after))
        for role, placement in placed.items():
            key = keys[role]
            for target, statements in ((before, placement.before), (after, placement.after)):
                listed = target.setdefault(key, [])
                if not all(stmt in listed for stmt in statements):
                    listed.extend(statements)
            name = placement.operand.name
            old = shapes.get(name, placement.shape)
            shapes[name] = tuple(max(a, b) for a, b in zip(old, placement.shape, strict=True))
        new_calls[id(call)] = replace(call.with_operands(lambda role, _, p=placed: p[role].operand), epilogue=(),
                                      overwrite=call.overwrite and out not in placed)

    class Place(Rewriter):
        def rewrite_For(self, loop: For) -> Stmt:
            body = seq(*before.get(id(loop), []), self.rewrite(loop.body), *after.get(id(loop), []))
            return For(loop.var, loop.start, loop.stop, loop.stride, body)

        def rewrite_Call(self, call: Call) -> Stmt:
            return new_calls[id(call)]

    # The GEMM lays its tiles out over the 8 x 8 mesh; the other primitives are data-parallel.
    spread = "mesh" if calls[0][0].signature.kind == "gemm" else "flat"
    allocated = tuple(LocalBuffer(name, shape, "float32", spread=spread) for name, shape in shapes.items())
    body = seq(*(Alloc(b.name) for b in allocated), *before.get(None, []),
               *(stmt for index, statement in enumerate(_nest_statements(module))
                 for stmt in (*before.get(("segment", index), []), Place().rewrite(statement),
                              *after.get(("segment", index), []))),
               *after.get(None, []))
    return replace(module, buffers=module.buffers + allocated, body=body)


def statements_of_outside_transfers(moves: Sequence[tuple[Hashable, int]]) -> list[int | None]:
    """Where each of a nest's transfers outside every loop goes, given its identity (equal: one transfer
    its calls share) and the statement of the nest's body holding its call: at the start (and end) of that
    statement where only its calls use the transfer (the peeled copies of the outermost loops run one
    after another: its buffer is live there alone); None, at the kernel's root, where calls of several
    statements share it. `place_transfers` places them so, `hoist_dma` counts their local memory so."""
    users: dict[Hashable, set[int]] = {}
    for identity, statement in moves:
        users.setdefault(identity, set()).add(statement)
    return [statement if len(users[identity]) == 1 else None for identity, statement in moves]


def nest_calls(module: Module) -> tuple[list[int], list[tuple[Call, tuple[For, ...]]]]:
    """The primitive calls of a nest (its peeled copies' included) with their enclosing loops, and per
    call the statement of the nest's body that holds it."""
    found = [(index, (node, loops)) for index, stmt in enumerate(_nest_statements(module))
             for node, loops in walk(stmt) if isinstance(node, Call)]
    return [index for index, _ in found], [call for _, call in found]


def _nest_statements(module: Module) -> tuple[Stmt, ...]:
    """The statements of the nest's body: its outermost loop and the peeled copies that follow it."""
    return module.body.stmts if isinstance(module.body, Seq) else (module.body,)


def infer_dma(module: Module) -> Module:
    return place_transfers(module)
