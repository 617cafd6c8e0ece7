"""Timing of a candidate's program on one SW26010 core group, event by event.

The mesh runs the program in lockstep (the GEMM primitive synchronises its 64 CPEs), so one clock
`now` follows the instruction stream. A DMA statement is issued at `now` (costing a few issue
cycles), starts moving data after the start latency once the memory system is free (the 64 CPEs'
requests share one memory controller: transfers in flight queue behind each other), and completes
after its service time (`dma.service_cycles`: 128-byte transactions from the real start addresses
at the controller, per-block overhead on the transfer network). A `DmaWait` blocks until every
transfer with its reply has completed; a GEMM or a zeroing advances the clock. Transfers overlap
compute exactly as far as the program's waits allow.

`time_module` times a program without moving data. Where a loop's timeline becomes periodic (the
state relative to the clock repeats over whole periods of the addresses' 128-byte alignment) it
jumps over the repeated periods instead of stepping through them; `extrapolate=False` steps through
every iteration (the tests check both agree). It never calls the tuner's model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod

import numpy as np

from swauto.backends.sw26010.dma import TransferCost, blocks_cost, transfer_cost
from swauto.errors import SimulationError
from swauto.ir import expr as ex
from swauto.ir.memory import clip_box, row_major_strides, walked_strides
from swauto.ir.nodes import Call, Dma, DmaWait, For, If, Let, Module, Seq, Stmt, Zero
from swauto.ir.verify import VerificationError, verify
from swauto.ir.visitor import Visitor, walk
from swauto.machine import DTYPE_BYTES, SW26010
from swauto.passes.plan_local_memory import live_ranges, per_cpe_bytes
from swauto.primitives.elementwise import map_cycles

STATS = ("dma_get_bytes", "dma_put_bytes", "dma_transactions", "dma_requests", "dma_blocks", "flops",
         "gemm_calls", "compute_cycles", "dma_service_cycles")
_MAX_PERIOD = 64  # longest loop period (in iterations) the timing mode looks for


@lru_cache(maxsize=4096)
def gemm_cycles(m: int, n: int, k: int, vectorize: str | None, machine: SW26010) -> float:
    """Cycles of one call of the mesh GEMM primitive, from its instruction schedule (thesis 4.1).

    Each CPE holds an (M/8 x N/8) block of C; the call runs 8 register-communication steps, each over
    K/8. In a step a CPE walks its register blocks (16 along the vectorized dimension x 4 along the
    other): per block the K loop issues 16 VMADs in 16 cycles per K element (listing 4.1), after a
    pipeline fill of a vector load and a VMAD latency. A step ends with the broadcast latency and a
    synchronisation. Operands are converted single -> double in LDM before (C also back after), and
    the call has a fixed entry/exit cost.
    """
    vec, other = (n, m) if vectorize == "N" else (m, n)
    steps = machine.mesh_columns
    per_cpe_vec = vec / machine.mesh_columns
    per_cpe_other = other / machine.mesh_rows
    blocks = math.ceil(per_cpe_vec / machine.gemm_register_block_vectorized) * math.ceil(
        per_cpe_other / machine.gemm_register_block_other)
    vmads_per_k = (machine.gemm_register_block_vectorized // machine.vector_lanes) * machine.gemm_register_block_other
    k_per_step = k / steps
    per_block = k_per_step * vmads_per_k + machine.vmad_latency_cycles + machine.vector_load_latency_cycles
    per_step = blocks * per_block + machine.register_comm_latency_cycles + machine.sync_cycles
    converted = (m * k + k * n + 2 * m * n) / machine.cpes
    return (machine.gemm_call_overhead_cycles + steps * per_step
            + converted * machine.gemm_conversion_cycles_per_element)


def call_cycles(call: Call, machine: SW26010) -> float:
    """Cycles of one primitive call on the mesh."""
    if call.signature.kind == "gemm":
        return gemm_cycles(int(call.size("M")), int(call.size("N")), int(call.size("K")), call.vectorize, machine)
    return map_cycles(call, machine)


@dataclass
class Timeline:
    """The machine's clocks (in cycles) and what has run so far.

    Guarantees: `now` never decreases; a transfer completes no earlier than its issue plus the start
    latency plus its service time, and no two transfers occupy the memory system at once.
    """

    machine: SW26010
    now: float = 0.0
    memory_free: float = 0.0
    pending: dict[str, float] = field(default_factory=dict)  # reply -> completion of its last transfer
    exchanges: dict[str, float] = field(default_factory=dict)  # reply -> CPE cycles its wait spends after it
    stats: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATS, 0.0))

    # --- events --------------------------------------------------------------------------------------

    def transfer(self, direction: str, cost: TransferCost | None, reply: str, local_cycles: float = 0.0,
                 exchange_cycles: float = 0.0) -> None:
        """Issue one mesh-wide DMA (None: nothing to move, only the reply) after `local_cycles` of
        CPE work (zeroing the part of a tile outside a padded tensor; a put's exchange). A get's
        `exchange_cycles` are spent by the wait for its reply, once it has arrived."""
        machine = self.machine
        self.now += machine.dma_issue_cycles + local_cycles
        self.stats["compute_cycles"] += local_cycles
        if cost is None:
            self.pending.setdefault(reply, self.now)
            return
        if exchange_cycles:
            self.exchanges[reply] = self.exchanges.get(reply, 0.0) + exchange_cycles
        start = max(self.now + machine.dma_latency_cycles, self.memory_free)
        done = start + cost.service_cycles
        self.memory_free = done
        self.pending[reply] = max(self.pending.get(reply, 0.0), done)
        stats = self.stats
        stats["dma_get_bytes" if direction == "get" else "dma_put_bytes"] += cost.bytes
        stats["dma_transactions"] += cost.transactions
        stats["dma_requests"] += cost.requests
        stats["dma_blocks"] += cost.blocks
        stats["dma_service_cycles"] += cost.service_cycles

    def wait(self, reply: str) -> None:
        """Block until every transfer issued with `reply` has completed."""
        self.now = max(self.now, self.pending.pop(reply, 0.0))
        exchange = self.exchanges.pop(reply, 0.0)
        self.now += exchange
        self.stats["compute_cycles"] += exchange

    def compute(self, cycles: float, flops: int = 0, gemm: bool = False) -> None:
        self.now += cycles
        self.stats["compute_cycles"] += cycles
        self.stats["flops"] += flops
        self.stats["gemm_calls"] += gemm

    # --- periodicity ---------------------------------------------------------------------------------

    def relative_state(self) -> tuple:
        """Everything that decides the future, relative to `now` (times already past are equivalent
        to 0): equal states at two points evolve identically under identical statements."""
        now = self.now
        waiting = tuple(sorted((r, round(t - now, 6)) for r, t in self.pending.items() if t > now))
        return round(max(self.memory_free - now, 0.0), 6), waiting, tuple(sorted(self.exchanges.items()))

    def snapshot(self) -> tuple[float, dict[str, float]]:
        return self.now, dict(self.stats)

    def repeat(self, before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]],
               times: int) -> None:
        """Advance by `times` more repetitions of what happened between two snapshots whose relative
        states are equal (the current state is `after`): every clock shifts by the same amount."""
        shift = (after[0] - before[0]) * times
        self.now += shift
        self.memory_free += shift
        self.pending = {r: t + shift for r, t in self.pending.items()}
        for key in STATS:
            self.stats[key] += (after[1][key] - before[1][key]) * times

    @property
    def seconds(self) -> float:
        return self.now / self.machine.clock_hz


def block_bandwidth(block: int, machine: SW26010) -> float:
    """Bytes per second of one mesh-wide DMA in which each CPE moves one block of `block` bytes (CPE i's
    at byte i x `block` of an aligned array), timed from issue (start latency included) to completion:
    the micro-benchmark of the measured table ../shared/data/sw26010_dma_bandwidth.csv, run on this
    machine."""
    cost = blocks_cost(np.arange(machine.cpes, dtype=np.int64) * block, block, machine)
    timeline = Timeline(machine)
    timeline.transfer("get", cost, "done")
    timeline.wait("done")
    return cost.bytes / ((timeline.now - machine.dma_issue_cycles) / machine.clock_hz)


def dma_table(machine: SW26010) -> tuple[int, ...]:
    """`block_bandwidth` in MB/s (rounded) of blocks of 1, 2, ... times `dma_measured_block_step`
    bytes, as many as the machine's table holds: what `SW26010.dma_measured_mbps` must be."""
    step = machine.dma_measured_block_step
    return tuple(round(block_bandwidth(step * (i + 1), machine) / 1e6) for i in range(len(machine.dma_measured_mbps)))


class Statements(Visitor):
    """The cost of each leaf statement (Dma, DmaWait, Call, Zero) given the loop variables, applied to a
    timeline: shared by the functional simulator (which also moves the data) and the timing-only mode."""

    def __init__(self, module: Module, machine: SW26010) -> None:
        self.machine = machine
        self.tensors = {t.name: t for t in module.tensors}
        self.flat = {b.name for b in module.buffers if b.spread == "flat"}  # data-parallel buffers
        self.strides = {t.name: row_major_strides(t.shape) for t in module.tensors}

    def visit_DmaWait(self, stmt: DmaWait, env: dict[str, int], timeline: Timeline) -> None:
        timeline.wait(stmt.reply)

    def visit_Call(self, stmt: Call, env: dict[str, int], timeline: Timeline) -> None:
        timeline.compute(call_cycles(stmt, self.machine), stmt.flops, stmt.signature.kind == "gemm")

    def visit_Zero(self, stmt: Zero, env: dict[str, int], timeline: Timeline) -> None:
        timeline.compute(self.zero_cycles(stmt.buffer.extents))

    def generic_visit(self, stmt: Stmt, env: dict[str, int], timeline: Timeline) -> None:
        pass  # an Alloc costs nothing

    def zero_cycles(self, extents: tuple[int, ...]) -> float:
        return prod(extents) / self.machine.cpes / self.machine.zero_elements_per_cycle

    def visit_Dma(self, stmt: Dma, env: dict[str, int], timeline: Timeline) -> None:
        tensor = self.tensors[stmt.tensor.name]
        box = stmt.moved_box()
        starts = [ex.compiled(s)(env) for s in box.starts]
        extents = box.extents
        local = 0.0
        strides = self.strides[tensor.name]
        if box.walks:
            # A window (rows overlapping along an axis two of its axes walk) moves whole: at the image's
            # edge the CPEs would skip a few of its rows, which this counts as moved.
            strides = walked_strides(tensor.shape, box.walks)
            local = self.zero_cycles(extents) if stmt.zero_fill else 0.0
        elif stmt.zero_fill and stmt.direction == "get":
            _, inside, clipped = clip_box(tuple(starts), extents, tensor.shape, box.steps)
            if clipped != extents:  # the CPEs zero their part of the tile, then the inside moves
                local = self.zero_cycles(extents)
            starts, extents = list(inside), clipped
            if 0 in extents:
                timeline.transfer(stmt.direction, None, stmt.reply, local)
                return
        element = DTYPE_BYTES[tensor.dtype]
        base = sum(s * t for s, t in zip(starts, strides, strict=True)) * element
        cost = transfer_cost(tensor.shape, tuple(extents), base % self.machine.dma_transaction_bytes, element,
                             self.machine, box.steps, stmt.buffer.name in self.flat or stmt.exchanged, box.walks)
        # Each CPE passes on its share of the tile (a window's elements, where its bounding box moved).
        exchange = self.machine.exchange_cycles(prod(stmt.tensor.extents) * element) if stmt.exchanged else 0.0
        if stmt.direction == "put":
            local, exchange = local + exchange, 0.0
        timeline.transfer(stmt.direction, cost, stmt.reply, local, exchange)


@dataclass(frozen=True)
class _LoopFacts:
    period: int  # iterations after which every address in the body has the same 128-byte alignment
    edge: int  # iterations at either end where a zero-filled transfer may be clipped (run exactly)


class _Timer(Visitor):
    def __init__(self, module: Module, machine: SW26010, extrapolate: bool) -> None:
        self.module = module
        self.statements = Statements(module, machine)
        self.timeline = Timeline(machine)
        self.extrapolate = extrapolate
        self.facts: dict[int, _LoopFacts] = {}

    def visit_Seq(self, stmt: Seq, env: dict[str, int]) -> None:
        for child in stmt.stmts:
            if isinstance(child, Let):
                env = {**env, child.var: ex.compiled(child.value)(env)}
            else:
                self.visit(child, env)

    def visit_For(self, stmt: For, env: dict[str, int]) -> None:
        self.loop(stmt, env)

    def visit_If(self, stmt: If, env: dict[str, int]) -> None:
        if stmt.cond.holds(env):
            self.visit(stmt.then, env)
        elif stmt.otherwise is not None:
            self.visit(stmt.otherwise, env)

    def visit_Let(self, stmt: Let, env: dict[str, int]) -> None:
        pass  # a Let outside a Seq binds nothing that follows it

    def generic_visit(self, stmt: Stmt, env: dict[str, int]) -> None:
        self.statements.visit(stmt, env, self.timeline)

    def loop_facts(self, loop: For) -> _LoopFacts:
        facts = self.facts.get(id(loop))
        if facts is None:
            facts = self.facts[id(loop)] = _loop_facts(loop, self.module, self.statements.machine)
        return facts

    def loop(self, stmt: For, env: dict[str, int]) -> None:
        start, stop = ex.compiled(stmt.start)(env), ex.compiled(stmt.stop)(env)
        trips = max(0, -(-(stop - start) // stmt.stride))
        facts = self.loop_facts(stmt)
        timeline = self.timeline
        history: list[tuple[int, tuple, tuple]] = []  # (iteration, relative state, snapshot) before it
        i = 0
        while i < trips:
            if self.extrapolate and trips - i > facts.edge + 1:
                history.append((i, timeline.relative_state(), timeline.snapshot()))
                del history[:-2 * _MAX_PERIOD - 1]
                period = _period(history, facts)
                if period:
                    times = (trips - facts.edge - 1 - i) // period
                    if times > 0:
                        timeline.repeat(history[-1 - period][2], history[-1][2], times)
                        i += times * period
                        history.clear()
                        continue
            self.visit(stmt.body, {**env, stmt.var: start + i * stmt.stride})
            i += 1


def _period(history: list[tuple[int, tuple, tuple]], facts: _LoopFacts) -> int | None:
    """The shortest period (a multiple of the alignment period) over which the last two periods of
    `history` repeated the same relative state, away from the loop's clipped first iterations."""
    last, state = history[-1][0], history[-1][1]
    for period in range(facts.period, _MAX_PERIOD + 1, facts.period):
        if len(history) < 2 * period + 1:
            return None
        first = history[-1 - 2 * period]
        if first[0] == last - 2 * period and first[0] >= facts.edge and history[-1 - period][1] == state \
                and first[1] == state:
            return period
    return None


def _loop_facts(loop: For, module: Module, machine: SW26010) -> _LoopFacts:
    """How a loop's body depends on its variable: the alignment period of every DMA address in it,
    and how many iterations at each end may clip a zero-filled transfer."""
    period, edge = 1, 1
    for node, _ in walk(loop.body):
        if not isinstance(node, Dma):
            continue
        tensor = module.tensor(node.tensor.name)
        element = DTYPE_BYTES[tensor.dtype]
        step = 0
        for axis, (start, extent, stride) in enumerate(zip(node.tensor.starts, node.tensor.extents,
                                                           walked_strides(tensor.shape, node.tensor.walks),
                                                           strict=True)):
            form = ex.linear_form(start)
            coefficient = form[0].get(loop.var, 0) * loop.stride if form is not None else 1
            step += coefficient * stride * element
            if node.zero_fill and coefficient:
                span = (extent - 1) * node.tensor.step(axis) + 1
                edge = max(edge, -(-span // abs(coefficient)) + 3)
        line = machine.dma_transaction_bytes
        period = math.lcm(period, line // math.gcd(line, abs(step)) if step else 1)
    return _LoopFacts(period, edge)


def check_local_memory(module: Module, machine: SW26010) -> int:
    """The bytes of local memory the program needs per CPE; raises `SimulationError` when its
    buffers do not fit, or when two that may be live at once (`live_ranges`) overlap (both simulators
    run it first; the functional one also checks each read against what wrote those bytes last)."""
    live = live_ranges(module)
    used = 0
    ranges: dict[int, list[tuple[int, int, str]]] = {}  # per statement: buffers of others may overlap
    resident: list[tuple[int, int, str]] = []  # buffers kept across statements overlap none
    for buffer in module.buffers:
        size = per_cpe_bytes(buffer, machine)
        start = buffer.offset if buffer.offset is not None else used
        placed = (start, start + size, buffer.name)
        (resident if buffer.resident else ranges.setdefault(buffer.statement, [])).append(placed)
        used = max(used, start + size)
    for placed in [resident + group for group in ranges.values()] or [resident]:
        for index, (start, end, first) in enumerate(placed):
            for other_start, other_end, second in placed[index + 1:]:
                one, other = live[first], live[second]
                if start < other_end and other_start < end and one.overlaps(other):
                    raise SimulationError(f"local buffers {first} and {second} overlap in LDM while both are live")
    if used > machine.ldm_usable_bytes:
        raise SimulationError(
            f"the program needs {used} B of local memory per CPE; a CPE has "
            f"{machine.ldm_usable_bytes} B besides its reserve"
        )
    return used


def check_program(module: Module, machine: SW26010) -> None:
    """Raise `SimulationError` for a program the machine would not run right: buffers that do not fit
    local memory, or IR that breaks an invariant of `swauto.ir.verify` (a box outside its tensor or
    buffer, a transfer never waited for or one overlapping another in flight, a read of a buffer
    before its data arrived). The timing-only mode checks this up front: it jumps over loop
    iterations, so it cannot meet every bad one as the functional simulator does."""
    check_local_memory(module, machine)
    try:
        verify(module)
    except VerificationError as error:
        raise SimulationError(str(error)) from None


@dataclass(frozen=True)
class Timing:
    """The timed run of a program: its simulated seconds and what it moved and computed."""

    seconds: float
    cycles: float
    stats: dict[str, float]

    def as_dict(self) -> dict[str, float]:
        return {"seconds": self.seconds, "cycles": self.cycles, **self.stats}


def time_module(module: Module, machine: SW26010, extrapolate: bool = True) -> Timing:
    """Simulated run time of `module` on one core group, without moving data (loop bounds must be
    constant given the enclosing loops). With `extrapolate`, periodic stretches of a loop are jumped
    over (same result as stepping through them, much faster). Raises `SimulationError` for a program
    the machine would not run right (`check_program`)."""
    check_program(module, machine)
    timer = _Timer(module, machine, extrapolate)
    timer.visit(module.body, {})
    timeline = timer.timeline
    if timeline.pending:
        raise SimulationError(f"the program ends with DMAs never waited for: {', '.join(sorted(timeline.pending))}")
    return Timing(timeline.seconds, timeline.now, dict(timeline.stats))
