"""Forwarding values between the statements of a compute block through local memory (thesis 5.2,
algorithm 6: an LSTM step keeps c, h and the gates in local memory between its element-wise passes).

Each statement is lowered on its own and ends with its results written back to memory; the next
statement reads them back. Here, in each *block* (the kernel's body, or the body of a sequence loop:
a loop whose body uses buffers of several statements), at its top level:

- **Forwarding.** A get of a box of a tensor whose values a local buffer of an earlier statement
  still holds (it put that box, or got it, and nothing since wrote that buffer or an overlapping box
  of the tensor) is dropped, and the later statement reads the holder instead. Only where the two
  are interchangeable: the same box of the same tensor (no padding, no strides, no zero fill), the
  same buffer shape (leading ones aside), box extents, dtype and spread over the mesh (so every CPE
  already holds its share: no exchange between CPEs is needed), and the dropped buffer is used
  nowhere but that box (a zero-padded primitive operand: that box and its padding, handed over only
  from a buffer zeroed over the same boxes that no call writes). The holder is marked `resident`: it
  keeps its local memory for the whole kernel.
- **Laying maps out as the GEMM does.** The buffers of an element-wise statement (maps only, every
  buffer of one shape) are spread over the mesh in contiguous shares per CPE by default. Laid out
  as a GEMM's buffer instead (its shape, padding included, in the mesh's 8 x 8 blocks), element
  (i, j) of every operand still sits on one CPE, so the statement computes the same; it is laid out
  so where that lets more of its reads be forwarded from holders (an LSTM step's gate tiles from the
  recurrent GEMM, algorithm 6). Its remaining transfers then move mesh blocks, which the simulator
  and the model price as such.
- **Carrying across iterations.** In a sequence loop (of constant bounds), a get of the box that the
  previous iteration left in a holder (the box with the loop variable one step back; nothing before
  the get in the iteration changes it or the holder, and the holder is not written again until the
  reader is done) becomes one get into the holder before the loop. A write-back of one box that
  nothing in the loop reads, from a buffer not written after it, is made once, after the loop. A
  get of one box of a tensor the loop never writes, into a buffer nothing else writes (outside any
  loop of more than one iteration), is made once before the loop.
- **Dead writes.** A put whose box no later get in the block may read is dropped when a later put
  of the same box in the block overwrites it first, or when its tensor is an intermediate
  (`Tensor.is_local`) that nothing reads afterwards: the block is the kernel's body, or a sequence
  loop at the kernel's top level whose every transfer of that tensor takes the slice of one axis
  numbered by the loop's variable (each iteration its own slice), with no transfer of it after the
  loop.

Guarantees: every value a statement reads is the one it read before (the holder holds that box's
current contents); every element of memory read later, or by the caller, is written as before.
Waits for dropped transfers and buffers no longer used go too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from swauto.ir import expr as ex
from swauto.ir.dependence import disjoint, loop_range, loop_ranges
from swauto.ir.nodes import Access, Alloc, Call, Dma, DmaWait, For, Let, LocalBuffer, Module, Seq, Stmt, Zero, seq
from swauto.ir.visitor import Rewriter, walk


@dataclass(frozen=True)
class _Holding:
    """`holder`, a box of a local buffer of statement `statement`, holds the values of `region`."""

    region: Access
    holder: Access
    statement: int


def forward_transfers(module: Module, invariants: bool = True, relayout: bool = True) -> Module:
    """`module` with values kept in local memory as the module docstring says. Every holder keeps its
    room for the whole kernel, so where that is too much, less can be kept: without `invariants`,
    loop-invariant gets stay in their loops (a weight tile per statement); without `relayout`, maps
    keep their own layout (and read a GEMM's results from memory)."""
    if len({buffer.statement for buffer in module.buffers}) < 2:
        return module
    forwarding = _Forwarding(module, invariants, relayout)
    body = seq(*forwarding.statements(module.body, loop=None)[0])
    if body == module.body:
        return module
    issued = {node.reply for node, _ in walk(body) if isinstance(node, Dma)}
    used = {access.name for node, _ in walk(body) if not isinstance(node, Zero) for access in _boxes(node)}
    body = _Prune(issued, used).rewrite(body)
    buffers = tuple(replace(b, resident=b.resident or b.name in forwarding.residents,
                            shape=forwarding.layout[b.name][0], spread=forwarding.layout[b.name][1])
                    for b in module.buffers if b.name in used)
    return replace(module, buffers=buffers, body=body)


class _Forwarding:
    def __init__(self, module: Module, invariants: bool, relayout: bool) -> None:
        self.module = module
        self.invariants = invariants
        self.statement_of = {buffer.name: buffer.statement for buffer in module.buffers}
        self.uses: dict[str, list[Access]] = {}  # every box of each local buffer the body reads or writes
        self.zeroed: dict[str, list[tuple[tuple[ex.Expr, ...], tuple[int | ex.Expr, ...]]]] = {}  # zeroed boxes
        self.computed: set[str] = set()  # buffers a call writes
        kinds: dict[int, set[str]] = {}  # per statement, the kinds of its calls
        for node, _ in walk(module.body):
            if isinstance(node, Zero):
                self.zeroed.setdefault(node.buffer.name, []).append((node.buffer.starts, node.buffer.extents))
                continue
            for access in _boxes(node):
                self.uses.setdefault(access.name, []).append(access)
            if isinstance(node, Call):
                self.computed.add(node.output.name)
                kinds.setdefault(self.statement_of[node.output.name], set()).add(node.signature.kind)
        self.residents: set[str] = set()
        # Each buffer's shape and spread: maps may take a mesh holder's (`choose_layout`).
        self.layout = {buffer.name: (buffer.shape, buffer.spread) for buffer in module.buffers}
        # statement -> its buffers, for maps that may take a GEMM's layout
        self.respreadable = _respreadable(module, kinds) if relayout else {}
        self.layout_decided: set[int] = set()

    def statements(self, body: Stmt, loop: For | None) -> tuple[tuple[Stmt, ...], list[_Holding], dict[int, set[str]]]:
        """The statements of a block (the kernel's body, or the sequence loop `loop`'s) after forwarding
        and dropping dead puts (sequence loops inside it are blocks of their own), the holdings valid
        at its end and, per statement, the holders it reads."""
        stmts: list[Stmt] = []
        for stmt in body.stmts if isinstance(body, Seq) else (body,):
            stmts += self.sequence_loop(stmt) if self.is_sequence_loop(stmt) else [stmt]
        forwarded, holdings, holders_of = self.forward(tuple(stmts))
        return self.drop_dead_puts(forwarded, loop), holdings, holders_of

    def sequence_loop(self, loop: For) -> list[Stmt]:
        """The sequence loop as a block, with the values one iteration leaves in local memory for the
        next carried there: a get the next iteration would make of a box a holder still holds is
        replaced by one get before the loop; a write-back of a box the loop never reads is made once,
        after it."""
        stmts, holdings, holders_of = self.statements(loop.body, loop)
        prologue: list[Stmt] = []
        epilogue: list[Stmt] = []
        if loop_range(loop) is not None:
            stmts = self.carry(stmts, loop, holdings, holders_of, prologue)
            stmts = self.sink_puts(stmts, loop, epilogue)
            if self.invariants:
                stmts = self.hoist_invariant_gets(stmts, prologue)
        return [*prologue, For(loop.var, loop.start, loop.stop, loop.stride, seq(*stmts)), *epilogue]

    def carry(self, stmts: tuple[Stmt, ...], loop: For, holdings: list[_Holding], holders_of: dict[int, set[str]],
              prologue: list[Stmt]) -> tuple[Stmt, ...]:
        """Gets of boxes that the previous iteration's holders hold, made once before the loop."""
        previous = ex.Var(loop.var) - loop.stride
        carried = [replace(h, region=_substituted(h.region, {loop.var: previous}))
                   for h in holdings if not any(ex.free_vars(e) for e in h.holder.starts)]
        substitute: dict[str, Access] = {}
        out: list[Stmt] = []
        for index, stmt in enumerate(stmts):
            stmt = _Substitute(substitute).rewrite(stmt) if substitute else stmt
            if isinstance(stmt, Dma) and stmt.direction == "get" and \
                    not _written(stmts[:index] + stmts[index + 1:], stmt.buffer.name):
                region = _substituted(stmt.tensor, {})
                valid = [h for h in carried if not any(_invalidated(h, s) for s in stmts[:index])]
                holding = self.holding_for(replace(stmt, tensor=region), valid, holders_of)
                reads = [i for i, s in enumerate(stmts) if any(a.name == stmt.buffer.name for n, _ in walk(s)
                                                                for a in _boxes(n))]
                if holding is not None and not _written(stmts[index + 1: reads[-1] + 1], holding.holder.name):
                    self.read_through(stmt, holding, substitute, holders_of)
                    first = _substituted(stmt.tensor, {loop.var: loop.start})
                    reply = f"{holding.holder.name}_carried"
                    prologue += [Dma("get", first, holding.holder, reply), DmaWait(reply)]
                    continue
            out.append(stmt)
        return tuple(out)

    def hoist_invariant_gets(self, stmts: tuple[Stmt, ...], prologue: list[Stmt]) -> tuple[Stmt, ...]:
        """Gets of one box of a tensor the loop never writes, into a buffer nothing else writes (inside
        loops of one iteration at most: a weight tile), made once before the loop."""
        body = seq(*stmts)
        written = {n.tensor.name for n, _ in walk(body) if isinstance(n, Dma) and n.direction == "put"}
        writers: dict[str, list[Stmt]] = {}
        for node, _ in walk(body):
            if (box := _written_box(node)) is not None:
                writers.setdefault(box.name, []).append(node)
        hoisted: set[int] = set()
        for node, loops in walk(body):
            if not (isinstance(node, Dma) and node.direction == "get" and _plain(node)) or \
                    node.tensor.name in written or any(_trips(loop) != 1 for loop in loops):
                continue
            fixed = {loop.var: loop.start for loop in loops}
            get = replace(node, tensor=_substituted(node.tensor, fixed), buffer=_substituted(node.buffer, fixed))
            varying = any(ex.free_vars(e) for a in (get.tensor, get.buffer) for e in a.starts)
            if varying or writers[get.buffer.name] != [node]:
                continue
            reply = f"{get.buffer.name}_invariant"
            prologue += [replace(get, reply=reply), DmaWait(reply)]
            self.residents.add(get.buffer.name)
            hoisted.add(id(node))
        return tuple(_Drop(hoisted).rewrite(stmt) for stmt in stmts) if hoisted else stmts

    def sink_puts(self, stmts: tuple[Stmt, ...], loop: For, epilogue: list[Stmt]) -> tuple[Stmt, ...]:
        """Write-backs of one box the loop never reads, made once after it from their buffer."""
        out = list(stmts)
        for index in reversed(range(len(out))):
            put = out[index]
            if not (isinstance(put, Dma) and put.direction == "put" and _plain(put)):
                continue
            names = {v for a in (put.tensor, put.buffer) for e in a.starts for v in ex.free_vars(e)}
            others = [n for s in out for n, loops in walk(s) if isinstance(n, Dma) and n is not put and
                      n.tensor.name == put.tensor.name and
                      (n.direction == "get" or not _apart(n.tensor, put.tensor, loops))]
            if names or others or _written(tuple(out[index + 1:]), put.buffer.name):
                continue
            del out[index]
            reply = f"{put.reply}_last"
            epilogue[:0] = [replace(put, reply=reply), DmaWait(reply)]
            self.residents.add(put.buffer.name)
        return tuple(out)

    def is_sequence_loop(self, stmt: Stmt) -> bool:
        return isinstance(stmt, For) and len({self.statement_of[a.name] for node, _ in walk(stmt.body)
                                              for a in _boxes(node) if a.name in self.statement_of}) > 1

    # --- forwarding ----------------------------------------------------------------------------

    def forward(self, stmts: tuple[Stmt, ...]) -> tuple[tuple[Stmt, ...], list[_Holding], dict[int, set[str]]]:
        holdings: list[_Holding] = []
        substitute: dict[str, Access] = {}  # dropped buffer -> the holder box it reads instead
        holders_of: dict[int, set[str]] = {}  # per statement, the holder buffers it reads
        out: list[Stmt] = []
        for index, stmt in enumerate(stmts):
            stmt = _Substitute(substitute).rewrite(stmt) if substitute else stmt
            if isinstance(stmt, Dma) and stmt.direction == "get":
                self.choose_layout(stmts[index:], self.statement_of[stmt.buffer.name], holdings, holders_of)
                holding = self.holding_for(stmt, holdings, holders_of)
                if holding is not None:
                    self.read_through(stmt, holding, substitute, holders_of)
                    continue
            holdings = [h for h in holdings if not _invalidated(h, stmt)]
            if isinstance(stmt, Dma) and _plain(stmt):
                holdings.append(_Holding(stmt.tensor, stmt.buffer, self.statement_of[stmt.buffer.name]))
            out.append(stmt)
        return tuple(out), holdings, holders_of

    def choose_layout(self, rest: tuple[Stmt, ...], statement: int, holdings: list[_Holding],
                      holders_of: dict[int, set[str]]) -> None:
        """At a statement's first get in a block: lay its buffers out as a mesh holder's (its shape, in
        mesh blocks) if that lets more of its gets in the block (`rest`, from this one on) read a holder
        than contiguous shares do."""
        if statement in self.layout_decided or statement not in self.respreadable:
            return
        self.layout_decided.add(statement)
        buffers = self.respreadable[statement]
        gets = [s for s in rest if isinstance(s, Dma) and s.direction == "get" and
                self.statement_of.get(s.buffer.name) == statement]

        def forwarded(layouts: dict[str, tuple[tuple[int, ...], str]]) -> int:  # tried in place; the best is set last
            self.layout.update(layouts)
            return sum(self.holding_for(get, holdings, holders_of) is not None for get in gets)

        own = {name: self.layout[name] for name in buffers}
        choices = [own]
        for shape in sorted({_squeezed(self.layout[h.holder.name][0]) for h in holdings
                             if self.layout[h.holder.name][1] == "mesh"}):
            layouts = {name: ((1,) * (len(own[name][0]) - len(shape)) + shape, "mesh") for name in buffers}
            if all(len(layouts[box.name][0]) == len(box.extents) and
                   all(isinstance(e, int) and e <= n for e, n in zip(box.extents, layouts[box.name][0], strict=True))
                   for box in self.uses_of(buffers)):
                choices.append(layouts)
        counts = [forwarded(layouts) for layouts in choices]
        self.layout.update(choices[max(range(len(choices)), key=lambda i: (counts[i], -i))])

    def placement(self, buffer: str) -> tuple[tuple[int, ...], str]:
        """Which CPE holds which element: the buffer's shape without leading ones, and its spread."""
        shape, spread = self.layout[buffer]
        return _squeezed(shape), spread

    def uses_of(self, buffers: list[str]) -> list[Access]:
        return [box for name in buffers for box in self.uses[name]]

    def read_through(self, get: Dma, holding: _Holding, substitute: dict[str, Access],
                     holders_of: dict[int, set[str]]) -> None:
        """Record that `get`'s buffer is read through `holding`'s holder from now on."""
        substitute[get.buffer.name] = holding.holder
        holders_of.setdefault(self.statement_of[get.buffer.name], set()).add(holding.holder.name)
        self.residents.add(holding.holder.name)

    def holding_for(self, get: Dma, holdings: list[_Holding], holders_of: dict[int, set[str]]) -> _Holding | None:
        """The holding a get may read instead of memory, if any."""
        if not _plain(get):
            return None
        name = get.buffer.name
        if name in self.residents:  # a holder filled before a sequence loop
            return None
        statement = self.statement_of[name]
        # A zeroed buffer's reads may run into its padding: the holder must have the same zeros there.
        padded = name in self.zeroed
        for use in self.uses[name]:
            if padded and not use.steps and (use.starts, use.extents) == (get.buffer.starts, get.buffer.extents):
                continue
            if use != get.buffer or use.pad or use.steps:
                return None
        mine = self.module.buffer(name)
        for holding in reversed(holdings):
            other = self.module.buffer(holding.holder.name)
            if holding.statement == statement or holding.region != get.tensor or \
                    holding.holder.extents != get.buffer.extents or \
                    (other.dtype, *self.placement(other.name)) != (mine.dtype, *self.placement(name)):
                continue
            if padded and not (self.zeroed.get(other.name) == self.zeroed[name] and other.name not in self.computed
                               and holding.holder.starts == get.buffer.starts):
                continue
            # One operand per statement through each holder: a statement writing one of them would
            # change what the other reads.
            if holding.holder.name in holders_of.get(statement, set()):
                continue
            return holding
        return None

    # --- dead puts -----------------------------------------------------------------------------

    def drop_dead_puts(self, stmts: tuple[Stmt, ...], loop: For | None) -> tuple[Stmt, ...]:
        out = list(stmts)
        for index in reversed(range(len(out))):
            stmt = out[index]
            if not (isinstance(stmt, Dma) and stmt.direction == "put" and not stmt.tensor.steps):
                continue
            later = out[index + 1:]
            if self.read_later(stmt.tensor, later) is False and \
                    (self.overwritten(stmt.tensor, later) or self.private(stmt.tensor.name, loop)):
                del out[index]
        return tuple(out)

    @staticmethod
    def read_later(region: Access, later: list[Stmt]) -> bool:
        """Whether a get among `later` (at any depth) may read an element of `region`."""
        for stmt in later:
            for node, loops in walk(stmt):
                if isinstance(node, Dma) and node.direction == "get" and node.tensor.name == region.name and \
                        not _apart(node.tensor, region, loops):
                    return True
        return False

    @staticmethod
    def overwritten(region: Access, later: list[Stmt]) -> bool:
        """Whether a top-level put among `later` writes exactly `region` (reads were checked before)."""
        return any(isinstance(s, Dma) and s.direction == "put" and s.tensor == region for s in later)

    def private(self, tensor: str, loop: For | None) -> bool:
        """Whether every value of intermediate `tensor` put in this block is read, if ever, only in the
        same block run (the same iteration of `loop`)."""
        if not self.module.tensor(tensor).is_local:
            return False
        top = self.module.body.stmts if isinstance(self.module.body, Seq) else (self.module.body,)
        if loop is None:
            return True
        if not any(stmt is loop for stmt in top):
            return False
        after = top[next(i for i, s in enumerate(top) if s is loop) + 1:]
        if any(isinstance(n, Dma) and n.tensor.name == tensor for s in after for n, _ in walk(s)):
            return False
        boxes = [n.tensor.bounding_box() for n, _ in walk(loop.body) if isinstance(n, Dma) and n.tensor.name == tensor]
        own = ex.Var(loop.var)
        return any(all(box.starts[axis] == own and box.extents[axis] == 1 for box in boxes)
                   for axis in range(len(boxes[0].starts)))


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` without its leading ones (a [1, M, N] and an [M, N] tile lie alike on the mesh)."""
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


def _respreadable(module: Module, kinds: dict[int, set[str]]) -> dict[int, list[str]]:
    """Per statement whose calls are all maps (`kinds`: per statement, its calls' kinds) on buffers of
    one shape (leading ones aside), those buffers' names."""
    buffers: dict[int, list[LocalBuffer]] = {}
    for buffer in module.buffers:
        buffers.setdefault(buffer.statement, []).append(buffer)
    return {statement: [b.name for b in mine] for statement, mine in buffers.items()
            if kinds.get(statement) == {"map"} and len({(_squeezed(b.shape), b.dtype) for b in mine}) == 1}


def _plain(dma: Dma) -> bool:
    return not (dma.zero_fill or dma.tensor.pad or dma.tensor.steps or dma.tensor.walks or dma.buffer.pad
                or dma.buffer.steps)


def _apart(a: Access, b: Access, loops: tuple[For, ...]) -> bool:
    """Whether two boxes of one tensor provably share no element, for every value of the variables
    (those of `loops` in their ranges; `b` uses none of them)."""
    a, b = a.bounding_box(), b.bounding_box()
    if a.steps or b.steps or not all(isinstance(e, int) for e in a.extents + b.extents):
        return False
    return disjoint(a.starts, a.extents, b.starts, b.extents, loop_ranges(loops))  # type: ignore[arg-type]


def _invalidated(holding: _Holding, stmt: Stmt) -> bool:
    """Whether `stmt` may change the values of `holding`'s region or of its holder, or redefine a
    variable their boxes use."""
    names = {v for access in (holding.region, holding.holder) for e in access.starts for v in ex.free_vars(e)}
    for node, loops in walk(stmt):
        if isinstance(node, Let) and node.var in names:
            return True
        if isinstance(node, Dma) and node.direction == "put" and node.tensor.name == holding.region.name and \
                not _apart(node.tensor, holding.region, loops):
            return True
        written = _written_box(node)
        if written is not None and written.name == holding.holder.name:
            return True
    return False


def _written(stmts: tuple[Stmt, ...], buffer: str) -> bool:
    """Whether a statement among `stmts` (at any depth) writes `buffer`."""
    return any((box := _written_box(node)) is not None and box.name == buffer for s in stmts for node, _ in walk(s))


def _written_box(node: Stmt) -> Access | None:
    """The local buffer box `node` writes, if any."""
    if isinstance(node, Dma) and node.direction == "get":
        return node.buffer
    if isinstance(node, Zero):
        return node.buffer
    if isinstance(node, Call):
        return node.output
    return None


def _boxes(node: Stmt) -> tuple[Access, ...]:
    """The local buffer boxes a leaf statement names (tensors' too, for a Call before `infer_dma`)."""
    if isinstance(node, Dma):
        return (node.buffer,)
    if isinstance(node, Zero):
        return (node.buffer,)
    if isinstance(node, Call):
        return tuple(access for _, access in node.operands)
    return ()


class _Substitute(Rewriter):
    """Reads of a dropped buffer's box become reads of its holder's box (the dims and padding stay the
    reader's)."""

    def __init__(self, holders: dict[str, Access]) -> None:
        self.holders = holders

    def access(self, access: Access) -> Access:
        holder = self.holders.get(access.name)
        return access if holder is None else replace(access, name=holder.name, starts=holder.starts)

    def rewrite_Dma(self, stmt: Dma) -> Stmt:
        return replace(stmt, buffer=self.access(stmt.buffer))

    def rewrite_Call(self, stmt: Call) -> Stmt:
        return stmt.with_operands(lambda _, access: self.access(access))


def _trips(loop: For) -> int | None:
    span = loop_range(loop)
    return None if span is None else (span[1] - span[0]) // loop.stride + 1


def _substituted(access: Access, values: dict[str, ex.Expr]) -> Access:
    return replace(access, starts=tuple(ex.simplify(ex.substitute(e, values)) for e in access.starts))


class _Drop(Rewriter):
    """Drops the statements in `dropped` (by identity)."""

    def __init__(self, dropped: set[int]) -> None:
        self.dropped = dropped

    def rewrite_Dma(self, stmt: Dma) -> Stmt:
        return Seq(()) if id(stmt) in self.dropped else stmt


class _Prune(Rewriter):
    """Drops waits for replies no transfer uses any more, and allocations and zeroing of buffers
    nothing reads or writes any more."""

    def __init__(self, issued: set[str], used: set[str]) -> None:
        self.issued, self.used = issued, used

    def rewrite_Seq(self, stmt: Seq) -> Stmt:
        kept = [self.rewrite(s) for s in stmt.stmts
                if not (isinstance(s, DmaWait) and s.reply not in self.issued)
                and not (isinstance(s, Alloc) and s.buffer not in self.used)
                and not (isinstance(s, Zero) and s.buffer.name not in self.used)]
        return seq(*kept) if kept else Seq(())
