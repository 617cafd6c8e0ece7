"""Double buffering: software prefetch of DMA transfers (thesis algorithm 8, 3.3.2).

Guarantees: every transfer placed in a loop gets two halves of its buffer (a new leading axis of
2). Iteration i computes on half i % 2 while the transfer for iteration i + 1 moves into the other
half; the address of "the next iteration" advances the innermost enclosing loop and rolls over to
outer loops at loop ends (algorithm 8, over every enclosing loop: a loop the address does not
depend on still repeats the transfer). A prologue before the outermost enclosing loop issues the
first transfer. An output tile is written back from its half without waiting; its next get waits
for the previous put, and the last put is waited for after the loops. Prefetching an output tile
moves its get before the put of the current tile and the statements between, so an output is
double buffered only where `swauto.ir.dependence` proves its next tile disjoint from the current
one and from every other buffer's transfer of that tensor inside the loops (a scatter such as a
transposed convolution's, whose consecutive tiles overlap, stays single buffered, as does a tile
whose innermost loop runs once). A tile the body only writes (a stored result: zeroed or overwritten
in local memory, then put) is double buffered too, where every other transfer of its tensor inside
the loops is proven disjoint from its tiles: iteration i writes half i % 2, waits for the put of
iteration i - 1 only after its own work and then puts its half without waiting, so each write-back
overlaps the next iteration's work (and half i % 2 is free again: its put of iteration i - 2 was
waited for before iteration i - 1's). Transfers at the root run once and are left as they are. The
bytes moved are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from swauto.ir import expr as ex
from swauto.ir.analysis import trip_count
from swauto.ir.dependence import disjoint, disjoint_anywhere, loop_ranges
from swauto.ir.nodes import Access, Call, Compare, Dma, DmaWait, For, If, Module, Seq, Stmt, Zero, seq
from swauto.ir.visitor import Rewriter, walk


@dataclass(frozen=True)
class _Transfer:
    zero: Zero | None
    get: Dma
    put: Dma | None


def _split_body(body: Stmt) -> tuple[list[_Transfer], list[Stmt], list[Dma]]:
    """The body's leading transfers (zero?, get, wait), its middle, and its trailing (put, wait) pairs:
    those of tiles it also gets with their gets, the others (stored results) apart. A zeroing among the
    leading transfers that no get of the same buffer follows (an output tile zeroed in local memory) is
    not a transfer: it goes to the start of the middle (it commutes with the gets of other buffers
    before which it stood)."""
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    transfers: list[_Transfer] = []
    zeroed: list[Zero] = []
    i = 0
    while i < len(stmts):
        zero = stmts[i] if isinstance(stmts[i], Zero) else None
        j = i + (zero is not None)
        if not (j + 1 < len(stmts) and isinstance(stmts[j], Dma) and stmts[j].direction == "get"
                and isinstance(stmts[j + 1], DmaWait)) or any(z.buffer.name == stmts[j].buffer.name for z in zeroed):
            break
        if zero is not None and zero.buffer.name != stmts[j].buffer.name:
            zeroed.append(zero)
            zero = None
        transfers.append(_Transfer(zero, stmts[j], None))
        i = j + 2
    end = len(stmts)
    gotten = {t.get.buffer.name for t in transfers}
    puts: dict[str, Dma] = {}
    stored: list[Dma] = []
    while end - 2 >= i and isinstance(stmts[end - 2], Dma) and stmts[end - 2].direction == "put" \
            and stmts[end - 1] == DmaWait(stmts[end - 2].reply):
        put = stmts[end - 2]
        if put.buffer.name in gotten:
            puts[put.buffer.name] = put
        else:
            stored.insert(0, put)
        end -= 2
    transfers = [replace(t, put=puts.get(t.get.buffer.name)) for t in transfers]
    return transfers, [*zeroed, *stmts[i:end]], stored


def _with_half(access: Access, half: ex.Expr) -> Access:
    return Access(access.name, (half, *access.starts), (1, *access.extents), (None, *access.dims),
                  (0, *access.pad) if access.pad else ())


def _linear_index(chain: list[For]) -> ex.Expr:
    index: ex.Expr = ex.Const(0)
    for loop in chain:
        index = index * trip_count(loop) + (ex.Var(loop.var) - loop.start) // loop.stride
    return index


def _next_points(chain: list[For]) -> list[tuple[Compare, dict[str, ex.Expr]]]:
    """Algorithm 8: (condition, substitution) from the innermost loop outwards."""
    points = []
    for depth in range(len(chain) - 1, -1, -1):
        loop = chain[depth]
        advanced = ex.Var(loop.var) + loop.stride
        mapping: dict[str, ex.Expr] = {loop.var: advanced}
        mapping.update({inner.var: inner.start for inner in chain[depth + 1 :]})
        points.append((Compare("<", advanced, loop.stop), mapping))
    return points


def _next_tile_disjoint(chain: list[For], box: Access) -> bool:
    """True when, at every step of algorithm 8's "next iteration", the next tile of `box` provably
    shares no element with the current one. The step that advances loop `chain[d]` happens only in
    its iterations before the last, with every loop inside it at its last iteration."""
    ranges = loop_ranges(chain)
    if len(ranges) != len(chain):
        return False
    for depth, (_, mapping) in zip(range(len(chain) - 1, -1, -1), _next_points(chain), strict=True):
        loop = chain[depth]
        first, last = ranges[loop.var]
        if last == first:
            continue  # this loop runs once: the step never happens
        branch = {**ranges, loop.var: (first, last - loop.stride)}
        branch.update({inner.var: (ranges[inner.var][1],) * 2 for inner in chain[depth + 1:]})
        following = [ex.substitute(start, mapping) for start in box.starts]
        if not disjoint(box.starts, box.spans(), following, box.spans(), branch):
            return False
    return True


def _others_disjoint(transfer: Dma, chain: list[For]) -> bool:
    """True when every transfer of another buffer inside `chain[0]` moves a box of `transfer`'s tensor
    that no tile of `transfer` meets: a prefetched tile (or a write-back still in flight) crosses the
    statements between two iterations, which must not write what it reads (nor read what it writes)."""
    ranges = loop_ranges(chain)
    box = transfer.tensor.bounding_box()
    for node, loops in walk(chain[0]):
        if isinstance(node, Dma) and node.tensor.name == box.name and node.buffer.name != transfer.buffer.name:
            other = node.tensor.bounding_box()
            if not disjoint_anywhere(box.starts, box.spans(), ranges, other.starts, other.spans(),
                                     loop_ranges(loops)):
                return False
    return True


def _box_at(dma: Dma, mapping: dict[str, ex.Expr]) -> Access:
    return replace(dma.tensor, starts=tuple(ex.substitute(s, mapping) for s in dma.tensor.starts))


class _DoubleBuffer(Rewriter):
    def __init__(self) -> None:
        self.doubled: set[str] = set()
        self.prologues: dict[int, list[Stmt]] = {}
        self.epilogues: dict[int, list[Stmt]] = {}
        self.chain: list[For] = []

    def rewrite_For(self, loop: For) -> Stmt:
        self.chain.append(loop)
        body = self.rewrite(loop.body)
        chain = list(self.chain)
        self.chain.pop()
        transfers, middle, stored = _split_body(body)
        stored_doubled = [put for put in stored if _others_disjoint(put, chain)]
        if not transfers and not stored_doubled:
            result: Stmt = For(loop.var, loop.start, loop.stop, loop.stride, body)
        else:
            kept_puts = [stmt for put in stored if put not in stored_doubled for stmt in (put, DmaWait(put.reply))]
            result = For(loop.var, loop.start, loop.stop, loop.stride,
                         self.pipeline(chain, transfers, middle + kept_puts, stored_doubled))
        outer = id(loop)
        return seq(*self.prologues.pop(outer, []), result, *self.epilogues.pop(outer, []))

    def pipeline(self, chain: list[For], transfers: list[_Transfer], middle: list[Stmt], stored: list[Dma]) -> Stmt:
        index = _linear_index(chain)
        half, other = index % 2, (index + 1) % 2
        first = {loop.var: loop.start for loop in chain}
        waits, prefetch, puts, kept = [], [], [], []
        for transfer in transfers:
            get, buffer = transfer.get, transfer.get.buffer.name
            # An output tile whose innermost loop runs once gains no overlap from a second half; one
            # whose prefetch is not proven independent of the writes it crosses would be read stale.
            if transfer.put is not None and (trip_count(chain[-1]) < 2 or not _next_tile_disjoint(chain, get.tensor)
                                             or not _others_disjoint(get, chain)):
                kept.append(transfer)
                continue
            self.doubled.add(buffer)
            zero_now = [] if transfer.zero is None else [Zero(_with_half(transfer.zero.buffer, ex.Const(0)))]
            self.prologues.setdefault(id(chain[0]), []).extend(
                [*zero_now, replace(get, tensor=_box_at(get, first), buffer=_with_half(get.buffer, ex.Const(0)))]
            )
            waits.append(DmaWait(get.reply))
            if transfer.put is not None:
                waits.append(DmaWait(transfer.put.reply))
                puts.append(replace(transfer.put, buffer=_with_half(transfer.put.buffer, half)))
                self.epilogues.setdefault(id(chain[0]), []).append(DmaWait(transfer.put.reply))
            zero_next = [] if transfer.zero is None else [Zero(_with_half(transfer.zero.buffer, other))]
            nested: Stmt | None = None
            for cond, mapping in reversed(_next_points(chain)):
                next_get = replace(get, tensor=_box_at(get, mapping), buffer=_with_half(get.buffer, other))
                issue = seq(*zero_next, next_get)
                nested = If(cond, issue, nested)
            prefetch.append(nested)
        # A stored result's previous write-back (from the other half) is waited for after this
        # iteration's work, just before its own leaves.
        for put in stored:
            self.doubled.add(put.buffer.name)
            puts += [DmaWait(put.reply), replace(put, buffer=_with_half(put.buffer, half))]
            self.epilogues.setdefault(id(chain[0]), []).append(DmaWait(put.reply))
        kept_before = [s for t in kept for s in ((t.zero,) if t.zero else ()) + (t.get, DmaWait(t.get.reply))]
        kept_after = [s for t in kept if t.put for s in (t.put, DmaWait(t.put.reply))]
        doubled = {t.get.buffer.name for t in transfers if t not in kept} | {put.buffer.name for put in stored}
        middle = [_UseHalves({name: half for name in doubled}).rewrite(stmt) for stmt in middle]
        return seq(*kept_before, *waits, *prefetch, *middle, *puts, *kept_after)


class _UseHalves(Rewriter):
    """Primitive operands (an epilogue's too) and zeroings of a doubled buffer use the half of the
    current iteration."""

    def __init__(self, halves: dict[str, ex.Expr]) -> None:
        self.halves = halves

    def use(self, _: str, access: Access) -> Access:
        return _with_half(access, self.halves[access.name]) if access.name in self.halves else access

    def rewrite_Call(self, call: Call) -> Stmt:
        return replace(call.with_operands(self.use), epilogue=tuple(e.with_operands(self.use) for e in call.epilogue))

    def rewrite_Zero(self, stmt: Zero) -> Stmt:
        return Zero(self.use("", stmt.buffer))


def double_buffer(module: Module) -> Module:
    pass_ = _DoubleBuffer()
    body = pass_.rewrite(module.body)
    if not pass_.doubled:
        return module
    buffers = tuple(replace(b, shape=(2, *b.shape)) if b.name in pass_.doubled else b for b in module.buffers)
    return replace(module, buffers=buffers, body=body)
