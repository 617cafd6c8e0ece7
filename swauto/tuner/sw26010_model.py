"""The thesis' analytic performance model of a candidate on one SW26010 core group (3.2.2, 4.2.3, 6.2.5).

- A DMA statement costs `T_latency + sum over its blocks of (block size + waste) / PEAK_BW` (equations
  3-1 and 3-2 with the 64 CPEs' shares summed: each CPE has PEAK_BW / #CPE), the waste of a block being
  the bytes that round it to whole 128-byte transactions from its start address, but never less than
  its blocks' time at the bandwidth measured on the machine for that block size (swGEMM's
  implementation of the model looks it up the same way, `MBW_map`; the machine description holds the
  one measured on the timed simulator, the machine this code runs on). That figure was measured with one
  block per CPE and includes one start latency, so a transfer of several rounds of 64 blocks pays that
  latency once, not once per round. The blocks are the box's rows split across the 8 mesh columns;
  addresses are those of the loop nest's first iteration.
- A GEMM primitive call costs `a*K + b*K*M/(vecM*4) + c*K*M*N/4 + d` (equation 4-2), M the vectorized
  dimension, vecM its register block, plus `e*M*N` in the refined model (the per-block fill and
  conversion of C; the machine's `gemm_equation` keeps 4-2 alone as the baseline); the coefficients
  are fitted by least squares (`fit_gemm`).
- A candidate costs `T_DMA + T_compute` single buffered. Double buffered, `max(T_DMA, T_compute)` is
  applied loop by loop (thesis 3.2.2 leaves the overlap term to the program's structure), each loop in
  closed form from one iteration (the IR is read once; no iteration is stepped through):
  an iteration of a loop costs max(its own gets, the rest of its body) plus what it waits for in place:
  its write-backs (the next iteration waits for them before it prefetches into that half) and the gets
  of buffers the final IR left single buffered. One memory controller serves transfers in order, so an
  iteration's own gets, issued as it starts, also delay the first inner transfer the body waits for, by
  as much as they exceed the compute before that wait (the body's slack). An inner loop's last
  write-back is waited for only when that loop runs again, so the rest of the enclosing body hides it.
  The nest starts once the prologue's transfers (the gets before every loop) have arrived, and the
  total is never below T_DMA, which counts them too. The thesis' `max(T_DMA, T_compute)` plus the
  prologue counts them twice where the transfers bound the time: 13% over the simulator on a
  stride-2 layer whose prologue moves its whole weight (Inception-v3 Mixed_6a dbl_3 at B = 1).

It reads only the IR (before double buffering, and the final IR for which buffers were split in two
halves and for the prologue) and the machine description, never a simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import gcd, prod

import numpy as np

from swauto.ir import expr as ex
from swauto.ir.analysis import trip_count
from swauto.ir.memory import merged_rows, row_major_strides, row_pieces, strided_box, walked_strides
from swauto.ir.nodes import Alloc, Call, Dma, DmaWait, For, If, Module, Seq, Stmt
from swauto.ir.visitor import walk
from swauto.machine import DTYPE_BYTES, SW26010
from swauto.primitives.elementwise import map_cycles


@dataclass(frozen=True)
class ModelEstimate:
    """The model's figures for one candidate, in seconds: all transfers, all primitive calls, the
    prologue's transfers, and the total (`seconds`: T_DMA + T_compute single buffered; double
    buffered, the prologue plus the nest timed loop by loop with max(T_DMA, T_compute) per
    iteration, and never below T_DMA)."""

    dma_seconds: float
    compute_seconds: float
    prologue_seconds: float
    overlapped: bool
    seconds: float
    dma_bytes: int = 0  # bytes moved and flops computed by one run (`swauto.ir.analysis.traffic`)
    flops: int = 0
    transfers: int = 0  # mesh-wide transfers one run issues


@lru_cache(maxsize=1 << 14)
def transfer_bytes(shape: tuple[int, ...], extents: tuple[int, ...], base_residue: int, element_bytes: int,
                   mesh_columns: int, line: int, steps: tuple[int, ...] = (), flat: bool = False,
                   cpes: int = 64, walks: tuple[int, ...] = ()) -> tuple[int, int, int]:
    """Sum over the blocks of a box of (block size + waste), the bytes the memory system fetches; the
    block size in bytes; the number of blocks.

    `base_residue` is the box's first byte modulo the transaction size; the blocks are its rows (runs
    along the last axis), split in `mesh_columns` pieces when a row divides evenly. In closed form: a
    block's transactions depend only on its first byte modulo the transaction size, and along each axis
    the rows' first bytes modulo it repeat with a period of line / gcd(step, line) rows, so the rows are
    counted per residue instead of listed. A strided last axis (`steps`) makes rows of one element.
    A data-parallel (`flat`) buffer's rows are the box's contiguous runs, cut as
    `swauto.ir.memory.row_pieces` says."""
    if flat:
        shape, extents, steps = merged_rows(shape, extents, steps, walks)
    strides, extents = strided_box(shape, extents, steps, walks)
    counts = {0: 1}  # first byte of a row (relative to the box's) modulo `line` -> rows
    for extent, stride in zip(extents[:-1], strides[:-1], strict=True):
        step = stride * element_bytes % line
        period = line // gcd(step, line) if step else 1
        whole, rest = divmod(extent, period)
        combined: dict[int, int] = {}
        for residue, rows in counts.items():
            for j in range(min(extent, period)):
                shifted = (residue + j * step) % line
                combined[shifted] = combined.get(shifted, 0) + rows * (whole + (j < rest))
        counts = combined
    run = extents[-1]
    pieces = row_pieces(run, prod(extents[:-1]), flat, mesh_columns, cpes)
    size = run // pieces * element_bytes
    lines = 0
    for residue, rows in counts.items():
        for piece in range(pieces):
            first = (base_residue + residue + piece * size) % line
            lines += rows * ((first + size - 1) // line + 1)
    return lines * line, size, prod(extents[:-1]) * pieces


def dma_seconds(shape: tuple[int, ...], starts: Sequence[int], extents: tuple[int, ...], element_bytes: int,
                machine: SW26010) -> float:
    """Equations 3-1/3-2 for one mesh-wide transfer of a box of a row-major tensor."""
    base = sum(s * t for s, t in zip(starts, row_major_strides(shape), strict=True)) * element_bytes
    line = machine.dma_transaction_bytes
    fetched, block, blocks = transfer_bytes(shape, extents, base % line, element_bytes, machine.mesh_columns, line)
    return machine.dma_latency_cycles / machine.clock_hz + moving_seconds(fetched, block, blocks, machine)


def moving_seconds(fetched: int, block: int, blocks: int, machine: SW26010) -> float:
    """Seconds a transfer of `blocks` blocks of `block` bytes (`fetched` bytes in whole transactions)
    occupies the memory system once started: the transactions at PEAK_BW, or the measured bandwidth for
    that block size, whichever is slower. The measured figure is one mesh-wide DMA of one block per CPE
    timed with its start latency, so a round of #CPE blocks streams in #CPE x block / bandwidth minus
    that latency (the transfer pays its latency once, in `dma_seconds`)."""
    latency = machine.dma_latency_cycles / machine.clock_hz
    cpes = machine.cpes
    round_seconds = cpes * block / machine.measured_bandwidth(block) - latency
    return max(fetched / machine.peak_bandwidth, blocks / cpes * round_seconds)


def gemm_features(m: int, n: int, k: int, vectorize: str | None, machine: SW26010) -> tuple[float, ...]:
    """The terms of the primitive's time for one call: equation 4-2's (K, K*M/(vecM*4), K*M*N/4, 1),
    M the vectorized dimension, then the refined model's M*N."""
    vec, other = (n, m) if vectorize == "N" else (m, n)
    return (k, k * vec / (machine.gemm_register_block_vectorized * 4), k * vec * other / 4, 1.0, vec * other)


def gemm_seconds(m: int, n: int, k: int, vectorize: str | None, machine: SW26010) -> float:
    """The primitive's time by the machine's `gemm_equation`: the refined model or equation 4-2."""
    coefficients = machine.gemm_fit_eq42 if machine.gemm_equation == "4-2" else machine.gemm_fit
    # Equation 4-2's coefficients weigh the first four terms; the refined model's all five.
    return sum(c * x for c, x in zip(coefficients, gemm_features(m, n, k, vectorize, machine), strict=False))


def call_seconds(call: Call, machine: SW26010) -> float:
    """A primitive call: the GEMM's fitted time (`gemm_seconds`); for a map or reduction, its vector
    instructions (one P0 and one P1 issue per cycle, data-parallel over the CPEs; thesis 5.1.3.1's
    counting) plus the call's entry and exit."""
    if call.signature.kind == "gemm":
        return gemm_seconds(int(call.size("M")), int(call.size("N")), int(call.size("K")), call.vectorize, machine)
    return map_cycles(call, machine) / machine.clock_hz


def fit_gemm(samples: Sequence[tuple[tuple[float, ...], float]], terms: int = 5) -> tuple[float, ...]:
    """Least-squares coefficients of the first `terms` features (`gemm_features`: 4 for equation 4-2,
    5 for the refined model) from (features, seconds) samples.

    Residuals are relative (each row divided by its time), so short calls count as much as long ones.
    Exact when the samples follow the equation."""
    features = np.array([f[:terms] for f, _ in samples], dtype=float)
    seconds = np.array([s for _, s in samples], dtype=float)
    coefficients, *_ = np.linalg.lstsq(features / seconds[:, None], np.ones_like(seconds), rcond=None)
    return tuple(float(x) for x in coefficients)


_FACTS: dict[int, tuple[SW26010, tuple[float, int, dict[tuple, float], dict[tuple, float]]]] = {}


def _machine_facts(machine: SW26010) -> tuple[float, int, dict[tuple, float], dict[tuple, float]]:
    """Per machine (looked up by identity: hashing the description costs more than a candidate's
    model): the DMA start latency in seconds, the transaction size, and two memo tables keyed by
    everything their entries depend on: seconds the memory system spends on a box (shape, extents,
    first byte modulo the transaction size, element size) and seconds of a primitive call (m, n, k,
    vectorized dimension)."""
    entry = _FACTS.get(id(machine))
    if entry is None or entry[0] is not machine:
        entry = _FACTS[id(machine)] = (machine, (machine.dma_latency_cycles / machine.clock_hz,
                                                 machine.dma_transaction_bytes, {}, {}))
    return entry[1]


@lru_cache(maxsize=1 << 12)
def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return row_major_strides(shape)


def _offset(starts: Sequence[ex.Expr], strides: Sequence[int], env: dict[str, int]) -> int:
    """Elements from a tensor's start to the box at `starts` for the loop variables `env`."""
    offset = 0
    for start, stride in zip(starts, strides, strict=True):
        kind = type(start)  # the common cases without building a function
        if kind is ex.Const:
            offset += start.value * stride
        elif kind is ex.Var:
            offset += env[start.name] * stride
        else:
            offset += ex.compiled(start)(env) * stride
    return offset


class _Model:
    """One pass over a candidate's loop nest (each transfer written once) that sums T_DMA, T_compute,
    the bytes moved and the flops, and times the nest loop by loop. A transfer's addresses are those of
    the first iteration of its loops; each loop's bounds are evaluated once."""

    def __init__(self, module: Module, machine: SW26010, single: frozenset[str] | set[str] = frozenset()) -> None:
        self.machine = machine
        self.single = single  # buffers whose transfers the final IR waits for at once (not prefetched)
        self.tails_hidden = True  # the nest's loops' last write-backs overlap the statements after them
        self.tensors = {t.name: (t.shape, _strides(t.shape), DTYPE_BYTES[t.dtype]) for t in module.tensors}
        self.flat = {b.name for b in module.buffers if b.spread == "flat"}  # data-parallel buffers
        self.latency, self.line, self.moving, self.gemms = _machine_facts(machine)
        self.dma = self.compute = 0.0
        self.dma_bytes = self.flops = self.transfers = 0

    def dma_time(self, dma: Dma, env: dict[str, int]) -> float:
        """Equations 3-1/3-2 for one mesh-wide transfer (`dma_seconds`) at the addresses `env` gives
        (`body` inlines the rest of this)."""
        access = dma.moved_box()
        shape, strides, element = self.tensors[access.name]
        if access.walks:
            strides = walked_strides(shape, access.walks)
        key = (shape, access.extents, _offset(access.starts, strides, env) * element % self.line, element,
               access.steps, dma.buffer.name in self.flat or dma.exchanged, access.walks)
        seconds = self.moving.get(key)
        seconds = self.latency + (self.moving_seconds(key) if seconds is None else seconds)
        return seconds + self.exchange_seconds(dma, element) if dma.exchanged else seconds

    def moving_seconds(self, key: tuple) -> float:
        """A transfer's time in the memory system after its start latency (an exchanged one moves as a
        data-parallel buffer's; its exchange is the CPEs' work: `exchange_seconds`)."""
        shape, extents, residue, element, steps, flat, walks = key
        machine = self.machine
        fetched, block, blocks = transfer_bytes(shape, extents, residue, element, machine.mesh_columns, self.line,
                                                steps, flat, machine.cpes, walks)
        seconds = self.moving[key] = moving_seconds(fetched, block, blocks, machine)
        return seconds

    def exchange_seconds(self, dma: Dma, element: int) -> float:
        return self.machine.exchange_cycles(prod(dma.tensor.extents) * element) / self.machine.clock_hz

    def body(self, stmts: Sequence[Stmt], env: dict[str, int], trips: int,
             nested: bool = True) -> tuple[float, float, float, float, bool, float]:
        """Statements run in sequence at the first iteration `env` of the loops around them, which run
        `trips` times in all (their transfers and calls are added to the totals): seconds of their
        prefetched gets, of their transfers waited for in place (write-backs, single-buffered gets),
        and of the rest; and their slack: the compute before the first wait for a transfer they issue
        themselves (a backlog of transfers queued ahead in the memory system up to that long costs no
        time), with whether such a wait closes it. `nested`: the statements are a loop's body."""
        gets = exposed = work = slack = puts = 0.0
        closed = False
        tails: list[tuple[float, float]] = []
        tensors, moving, line, single, flat = self.tensors, self.moving, self.line, self.single, self.flat
        for stmt in stmts:
            kind = type(stmt)
            if kind is DmaWait or kind is Alloc:
                continue
            if kind is Dma:
                access = stmt.moved_box()
                shape, strides, element = tensors[access.name]
                if access.walks:
                    strides = walked_strides(shape, access.walks)
                extents = access.extents
                key = (shape, extents, _offset(access.starts, strides, env) * element % line, element, access.steps,
                       stmt.buffer.name in flat or stmt.exchanged, access.walks)
                seconds = moving.get(key)
                if seconds is None:
                    seconds = self.moving_seconds(key)
                seconds += self.latency
                self.dma += trips * seconds
                self.dma_bytes += trips * element * prod(extents)
                self.transfers += trips
                if stmt.exchanged:  # the CPEs' work, where the get is waited for or before the put
                    exchange = self.exchange_seconds(stmt, element)
                    self.compute += trips * exchange
                    work += exchange
                if stmt.direction == "get" and stmt.buffer.name not in single:
                    gets += seconds
                else:
                    exposed += seconds
                    if stmt.direction == "get":
                        closed = True  # waited for at once, behind the backlog
                    elif stmt.buffer.name not in single:
                        puts += seconds  # waited for when the next iteration reuses the half
            elif kind is Call:
                key = (stmt.primitive, stmt.sizes, stmt.vectorize, tuple(a.dims for _, a in stmt.operands))
                seconds = self.gemms.get(key)
                if seconds is None:
                    seconds = self.gemms[key] = call_seconds(stmt, self.machine)
                self.compute += trips * seconds
                self.flops += trips * stmt.flops
                work += seconds
                if not closed:
                    slack += seconds
            elif kind is For:
                first = stmt.start
                begin = first.value if type(first) is ex.Const else ex.compiled(first)(env)
                last = stmt.stop
                count = max(0, ((last.value if type(last) is ex.Const else ex.compiled(last)(env)) - begin
                                + stmt.stride - 1) // stmt.stride)
                inner = stmt.body
                stmts_in = inner.stmts if type(inner) is Seq else (inner,)
                if count == 1 and nested:
                    # A loop that runs once inside a loop is part of that loop's body: its prefetches (of
                    # the tiles for its next run) are waited for when the body runs again.
                    g, e, w, s, c, p = self.body(stmts_in, {**env, stmt.var: begin}, trips)
                    gets += g
                    exposed += e
                    work += w
                    puts += p
                    if not closed:
                        slack += s
                        closed = c
                    continue
                seconds, inner_slack, waits, tail = self.loop(stmts_in, {**env, stmt.var: begin}, trips, count)
                work += seconds
                if tail:
                    tails.append((tail, seconds))
                if not closed:
                    slack += inner_slack
                    closed = waits
            elif kind is Seq or kind is If:
                seconds = self.branch(stmt, env, trips)
                work += seconds
                if not closed:
                    slack += seconds
        for tail, seconds in tails if nested or self.tails_hidden else ():
            # An inner loop's last write-back is waited for only when that loop runs again: meanwhile
            # the rest of this body computes.
            work -= min(tail, work - seconds)
        return gets, exposed, work, slack, closed, puts

    def loop(self, stmts: Sequence[Stmt], env: dict[str, int], trips: int,
             count: int) -> tuple[float, float, bool, float]:
        """All `count` iterations of a loop whose body is `stmts` (`env`: its first iteration); the slack
        of its first iteration; whether it waits for transfers; its last iteration's write-backs.

        Double buffered, an iteration's own gets (the next iteration's tiles, issued as it starts)
        overlap the rest of its body (max(T_DMA, T_compute) per iteration), and its write-backs are
        exposed: the next iteration waits for them before it prefetches into that half. One memory
        controller serves transfers in order, so the own gets also delay the body's first wait on a
        transfer issued after them (an inner loop's prefetch): by as much as they exceed its slack."""
        gets, exposed, work, slack, closed, puts = self.body(stmts, env, trips * count)
        if not closed and not gets and not exposed:  # pure compute: a backlog drains through it
            return count * work, count * work, False, 0.0
        stall = gets - slack if gets > slack else 0.0
        busy = work + stall
        iteration = (busy if busy > gets else gets) + exposed
        return count * iteration, max(0.0, min(slack, work) - gets), True, puts

    def branch(self, stmt: Stmt, env: dict[str, int], trips: int) -> float:
        """Seconds of a statement not directly in a loop's body: everything in sequence; the slower
        branch of an If."""
        if type(stmt) is If:
            seconds = self.branch(stmt.then, env, trips)
            return seconds if stmt.otherwise is None else max(seconds, self.branch(stmt.otherwise, env, trips))
        gets, exposed, work, _, _, _ = self.body(stmt.stmts if type(stmt) is Seq else (stmt,), env, trips)
        return gets + exposed + work


def _prologue(stmt: Stmt, model: _Model) -> float:
    """The gets outside every loop of the final IR (the double-buffered prologue)."""
    total = 0.0
    for node in stmt.stmts if type(stmt) is Seq else (stmt,):
        kind = type(node)
        if kind is Dma:
            if node.direction == "get":
                total += model.dma_time(node, {})
        elif kind is If:
            total += _prologue(node.then, model)
            if node.otherwise is not None:
                total += _prologue(node.otherwise, model)
    return total


_WORK = (For, Call, If, Seq)  # statements that compute (a transfer issued before them overlaps them)


def _write_backs_waited(module: Module, model: _Model) -> tuple[float, bool]:
    """`module`'s statements outside every loop, in order: the seconds of the write-backs among them that
    are waited for before any later work (the last ones: at the kernel's end), and whether the rest of
    the kernel hides its loops' last write-backs (False when the final IR waits for one before later
    work: a buffer of what follows shares its local memory, as a peeled tile's float64 copies may; IR
    before double buffering has no waits)."""
    stmts = module.body.stmts if type(module.body) is Seq else (module.body,)
    in_loops = {node.reply for node, loops in walk(module.body)
                if type(node) is Dma and node.direction == "put" and loops}
    pending: dict[str, float] = {}
    waited, hidden = 0.0, True
    for number, node in enumerate(stmts):
        kind = type(node)
        if kind is Dma and node.direction == "put":
            pending[node.reply] = pending.get(node.reply, 0.0) + model.dma_time(node, {})
        elif kind is DmaWait:
            waited += pending.pop(node.reply, 0.0)
            if node.reply in in_loops and any(type(later) in _WORK for later in stmts[number + 1:]):
                hidden = False
        elif kind in _WORK:
            pending.clear()  # the work after a write-back overlaps it
    return waited + sum(pending.values()), hidden


def estimate(module: Module, final: Module, double_buffered: bool, machine: SW26010) -> ModelEstimate:
    """The model's time for a candidate: `module` is its IR with each transfer written once (before
    double buffering), `final` the IR that runs (its transfers outside every loop are the prologue)."""
    single: set[str] = set()
    if double_buffered:
        # A buffer the final IR did not split in two halves is filled and waited for in place (an output
        # tile whose innermost loop runs once): its gets are exposed like the write-backs.
        ranks = {buffer.name: len(buffer.shape) for buffer in module.buffers}
        single = {b.name for b in final.buffers if ranks.get(b.name) == len(b.shape)}
    model = _Model(module, machine, single)
    waited = 0.0
    if double_buffered:
        waited, model.tails_hidden = _write_backs_waited(final, model)
    body = module.body
    # Transfers outside every loop (in `module`) run once, before the nest: not part of its work.
    _, _, work, _, _, _ = model.body(body.stmts if type(body) is Seq else (body,), {}, 1, False)
    dma, compute = model.dma, model.compute
    prologue = 0.0
    if double_buffered:
        # Transfers outside every loop are the prologue (counted once, from the final IR).
        prologue = _prologue(final.body, model)
        # The nest starts once its prologue has arrived and ends once its last write-backs have left; one
        # memory controller: never faster than all transfers back to back (the prologue's among them).
        seconds = max(prologue + work + waited, dma)
    else:
        seconds = dma + compute
    return ModelEstimate(dma, compute, prologue, double_buffered, seconds, model.dma_bytes, model.flops,
                         model.transfers)


def least_seconds(nest: Module, machine: SW26010) -> Callable[[int], float]:
    """No sketch that computes as `nest` does (no transfer in it) and moves `moved` bytes is priced
    below `least(moved)` by `sketch_seconds`: single buffered its transfers add to the compute, double
    buffered they overlap it, and never faster than the memory system's peak."""
    compute = sketch_seconds(nest, False, machine)
    return lambda moved: max(compute, moved / machine.peak_bandwidth)


def sketch_seconds(sketch: Module, double_buffered: bool, machine: SW26010,
                   peeled: Collection[str] = ()) -> float:
    """The model's time for a candidate's sketch (`swauto.tuner.sketch`): as `estimate`, with every
    transfer inside a loop prefetched when double buffered, a prologue of one of each get and an epilogue
    of the write-backs after the last work. But as `double_buffer` leaves it: an output tile read and
    written in the body of a loop of two trips whose last tile is shorter (`peeled`) is not prefetched.
    The real IR runs the whole tiles in a loop of one trip, and the last in a copy of its body after it:
    no next tile to prefetch. (Prefetched, sketches of 128 columns of VGG16 conv1_1's 224 at B = 1 were
    priced 28% below their real IR, and two such orders once took both double-buffered lowering slots
    of the best tiles.)"""
    single: set[str] = set()
    if double_buffered and peeled:
        transfers = [(node, loops) for node, loops in walk(sketch.body) if type(node) is Dma]
        gets = {node.buffer.name for node, _ in transfers if node.direction == "get"}
        single = {node.buffer.name for node, loops in transfers
                  if node.direction == "put" and node.buffer.name in gets and loops
                  and loops[-1].var in peeled and trip_count(loops[-1]) == 2}
    model = _Model(sketch, machine, single)
    body = sketch.body
    _, _, work, _, _, _ = model.body(body.stmts if type(body) is Seq else (body,), {}, 1, False)
    if not double_buffered:
        return model.dma + model.compute
    prologue = sum(model.dma_time(node, {loop.var: ex.evaluate(loop.start, {}) for loop in loops})
                   for node, loops in walk(body) if type(node) is Dma and node.direction == "get")
    return max(prologue + work + _write_backs_waited(sketch, model)[0], model.dma)
