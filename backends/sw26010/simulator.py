"""A functional simulator of one SW26010 core group running a candidate's final IR.

It holds real data: every local buffer is a NumPy array (the whole mesh's tile; each CPE owns an
8 x 8 block of it), DMAs copy real boxes between main memory and those buffers, and the GEMM
primitive computes in float64 as the real one does after its single-to-double conversion. It
enforces what the machine enforces: local-memory capacity, DMA bounds, and that no primitive
touches a buffer whose DMA has not been waited for. It counts DMA bytes and flops, and times every
statement as it executes on the event timeline of `timing.py` (128-byte memory transactions from the
blocks each CPE moves and their real start addresses, contention, latency, overlap of transfers with
compute as the program's waits allow, primitive cycles from its instruction schedule).

It never calls the tuner's cost model: it is the machine the model is judged against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from swauto.backends.sw26010.timing import Statements, Timeline, check_local_memory
from swauto.errors import SimulationError
from swauto.ir import expr as ex
from swauto.ir.memory import box_slices, clip_box, gather_window, strided_slices
from swauto.ir.nodes import Access, Alloc, Call, Dma, DmaWait, For, If, Let, Module, Seq, Stmt, Zero
from swauto.ir.printer import format_stmt
from swauto.ir.visitor import Visitor
from swauto.machine import SW26010
from swauto.passes.plan_local_memory import per_cpe_bytes
from swauto.primitives.semantics import run_call


@dataclass
class Counters:
    """What one run moved and computed."""

    dma_get_bytes: int = 0
    dma_put_bytes: int = 0
    dma_requests: int = 0  # one per CPE per DMA statement executed
    dma_transactions: int = 0  # 128-byte memory transactions
    flops: int = 0
    gemm_calls: int = 0
    calls: int = 0  # primitive calls of every kind
    ldm_bytes_per_cpe: int = 0
    seconds: float = 0.0  # simulated run time on one core group (the event timeline)

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


Box = tuple[str, tuple[int, ...], tuple[int, ...]]  # an array's name, starts, extents


def _overlap(a: Box, b: Box) -> bool:
    return a[0] == b[0] and all(s < t + f and t < s + e for s, e, t, f in zip(a[1], a[2], b[1], b[2], strict=True))


@dataclass(frozen=True)
class _Flight:
    """A transfer still moving: its direction and its local and tensor boxes."""

    direction: str
    local: Box
    memory: Box


@dataclass
class _State:
    arrays: dict[str, np.ndarray]
    buffers: dict[str, np.ndarray]
    # reply -> the transfers with that reply still in flight
    in_flight: dict[str, list[_Flight]] = field(default_factory=dict)
    # Per output element, how many puts wrote it; per buffer box filled by a get, the memory box it
    # came from and those counts then. A put back to that box, written by another put since the get,
    # would overwrite that result.
    versions: dict[str, np.ndarray] = field(default_factory=dict)
    read_at: dict[Box, tuple[Box, np.ndarray]] = field(default_factory=dict)
    # Buffers whose local memory another buffer sharing it has written since they were last written
    # themselves (-> that other buffer): reading one would read the other's data.
    clobbered: dict[str, str] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    timeline: Timeline | None = None

    def busy(self, box: Box) -> bool:
        """Whether a transfer still in flight touches this box of a local buffer."""
        return any(_overlap(flight.local, box) for flights in self.in_flight.values() for flight in flights)

    def conflict(self, direction: str, memory: Box) -> _Flight | None:
        """A transfer in flight on a box of the same tensor overlapping `memory`, one of the two a put."""
        for flights in self.in_flight.values():
            for flight in flights:
                if "put" in (direction, flight.direction) and _overlap(flight.memory, memory):
                    return flight
        return None


class _Machine(Visitor):
    def __init__(self, module: Module, machine: SW26010) -> None:
        self.module = module
        self.machine = machine
        self.tensors = {t.name: t for t in module.tensors}
        self.statements = Statements(module, machine)

    # --- local memory ----------------------------------------------------------------------------

    def allocate(self) -> tuple[dict[str, np.ndarray], int]:
        used = check_local_memory(self.module, self.machine)
        buffers = {b.name: np.zeros(b.shape, dtype=b.dtype) for b in self.module.buffers}
        # Buffers that share local memory (the plan gives buffers never live at once the same bytes):
        # each is kept apart here, and a write to one spoils the others' contents.
        spans = {b.name: (b.offset, b.offset + per_cpe_bytes(b, self.machine)) for b in self.module.buffers
                 if b.offset is not None}
        self.sharing = {name: {other for other, (start, end) in spans.items()
                               if other != name and start < span[1] and span[0] < end} for name, span in spans.items()}
        self.twins = {b.copy_of: b.name for b in self.module.buffers if b.copy_of is not None}
        return buffers, used

    def write(self, name: str, state: _State) -> None:
        """`name`'s local memory now holds its data: whatever shares those bytes lost its own."""
        state.clobbered.pop(name, None)
        for other in self.sharing.get(name, ()):
            state.clobbered[other] = name

    def read(self, name: str, what: str, state: _State) -> None:
        if name in state.clobbered:
            raise SimulationError(f"{what} reads {name}, whose local memory {state.clobbered[name]} (sharing it) "
                                  "has written since")

    # --- execution --------------------------------------------------------------------------------

    def visit_Seq(self, stmt: Seq, env: dict[str, int], state: _State) -> None:
        for child in stmt.stmts:
            if isinstance(child, Let):
                env = {**env, child.var: ex.compiled(child.value)(env)}
            else:
                self.visit(child, env, state)

    def visit_For(self, stmt: For, env: dict[str, int], state: _State) -> None:
        start, stop = ex.compiled(stmt.start)(env), ex.compiled(stmt.stop)(env)
        for i in range(start, stop, stmt.stride):
            self.visit(stmt.body, {**env, stmt.var: i}, state)

    def visit_If(self, stmt: If, env: dict[str, int], state: _State) -> None:
        if stmt.cond.holds(env):
            self.visit(stmt.then, env, state)
        elif stmt.otherwise is not None:
            self.visit(stmt.otherwise, env, state)

    def visit_DmaWait(self, stmt: DmaWait, env: dict[str, int], state: _State) -> None:
        state.in_flight.pop(stmt.reply, None)
        self.statements.visit(stmt, env, state.timeline)

    def visit_Zero(self, stmt: Zero, env: dict[str, int], state: _State) -> None:
        buffer = state.buffers[stmt.buffer.name]
        starts = self.box(stmt.buffer, env, buffer.shape, f"buffer {stmt.buffer.name}", stmt)
        if state.busy((stmt.buffer.name, starts, stmt.buffer.extents)):
            raise SimulationError(f"zeroing {stmt.buffer.name} while a DMA on that tile is in flight")
        buffer[box_slices(starts, stmt.buffer.extents)] = 0
        self.write(stmt.buffer.name, state)
        self.statements.visit(stmt, env, state.timeline)

    def visit_Alloc(self, stmt: Alloc, env: dict[str, int], state: _State) -> None:
        pass

    visit_Let = visit_Alloc  # a Let outside a Seq binds nothing that follows it

    def generic_visit(self, stmt: Stmt, env: dict[str, int], state: _State) -> None:
        raise TypeError(f"not a statement: {stmt!r}")

    def box(self, access: Access, env: dict[str, int], shape: tuple[int, ...], what: str, stmt: Stmt) -> tuple:
        starts = tuple(ex.compiled(s)(env) for s in access.starts)
        for axis, (start, extent, size) in enumerate(zip(starts, access.spans(), shape, strict=True)):
            if start < 0 or start + extent > size:
                where = f" (with {', '.join(f'{k}={v}' for k, v in env.items())})" if env else ""
                raise SimulationError(
                    f"DMA out of bounds: {format_stmt(stmt)[0].split('  #')[0]}{where} touches "
                    f"{what} axis {axis} at {start}..{start + extent - 1}, outside 0..{size - 1}"
                )
        return starts

    def visit_Dma(self, stmt: Dma, env: dict[str, int], state: _State) -> None:
        tensor = self.tensors[stmt.tensor.name]
        array = state.arrays[tensor.name]
        buffer = state.buffers[stmt.buffer.name]
        buffer_starts = self.box(stmt.buffer, env, buffer.shape, f"buffer {stmt.buffer.name}", stmt)
        local_box = (stmt.buffer.name, buffer_starts, stmt.buffer.extents)
        if state.busy(local_box):
            raise SimulationError(f"DMA into {stmt.buffer.name} while another DMA on that tile is in flight")
        self.statements.visit(stmt, env, state.timeline)
        local = buffer[box_slices(buffer_starts, stmt.buffer.extents)].reshape(stmt.tensor.extents)
        steps = stmt.tensor.steps
        if stmt.tensor.walks:
            self.window(stmt, env, state, array, local, local_box)
            return
        if stmt.zero_fill and stmt.direction == "get":
            # Only the part inside the tensor moves; the CPEs zero the rest of their tile.
            starts = tuple(ex.compiled(s)(env) for s in stmt.tensor.starts)
            first, tensor_starts, extents = clip_box(starts, stmt.tensor.extents, tensor.shape, steps)
            local[...] = 0
            local = local[box_slices(first, extents)]
        else:
            tensor_starts = self.box(stmt.tensor, env, tensor.shape, f"tensor {tensor.name}", stmt)
            extents = stmt.tensor.extents
        spans = tuple((e - 1) * stmt.tensor.step(axis) + 1 if e else 0 for axis, e in enumerate(extents))
        memory_box = (tensor.name, tensor_starts, spans)
        flight = _Flight(stmt.direction, local_box, memory_box)
        state.in_flight.setdefault(stmt.reply, [])
        if stmt.direction == "get":  # its tile now holds its data, zeros too where nothing inside moves
            self.write(stmt.buffer.name, state)
        if 0 in extents:
            state.in_flight[stmt.reply].append(flight)
            return
        other = state.conflict(stmt.direction, memory_box)
        if other is not None:
            raise SimulationError(f"a {stmt.direction} of {tensor.name} is issued while an overlapping "
                                  f"{other.direction} ({other.local[0]}) is in flight: {format_stmt(stmt)[0]}")
        region = strided_slices(tensor_starts, extents, steps)
        memory = array[region]
        if stmt.direction == "get":
            local[...] = memory
            state.counters.dma_get_bytes += memory.nbytes
            if tensor.is_output:
                state.read_at[local_box] = (memory_box, self.versions(state, tensor.name)[region].copy())
        else:
            self.read(stmt.buffer.name, f"the put `{format_stmt(stmt)[0].split('  #')[0].strip()}`", state)
            if tensor.is_output:
                versions = self.versions(state, tensor.name)
                # A tile read from this box and written back to it: no other put may have come between.
                box, read = state.read_at.pop(local_box, (None, None))
                if box == memory_box and (read != versions[region]).any():
                    raise SimulationError(f"{format_stmt(stmt)[0].split('  #')[0].strip()} overwrites what another "
                                          f"put wrote to {tensor.name} after {stmt.buffer.name} was read")
                versions[region] += 1
            memory[...] = local
            state.counters.dma_put_bytes += memory.nbytes
        state.in_flight[stmt.reply].append(flight)

    def window(self, stmt: Dma, env: dict[str, int], state: _State, array: np.ndarray, local: np.ndarray,
               local_box: Box) -> None:
        """A get of a window box (`Access.walks`): its rows overlap, so it is gathered element by
        element; overlap checks against puts in flight see the box around it."""
        if stmt.direction != "get":
            raise SimulationError(f"a window box can only be read: {format_stmt(stmt)[0]}")
        around = stmt.tensor.bounding_box()
        if not stmt.zero_fill:
            self.box(around, env, array.shape, f"tensor {stmt.tensor.name}", stmt)
        starts = tuple(ex.compiled(s)(env) for s in stmt.tensor.starts)
        values, inside = gather_window(array, starts, stmt.tensor.extents, stmt.tensor.steps, stmt.tensor.walks)
        first = tuple(ex.compiled(s)(env) for s in around.starts)
        low = tuple(max(start, 0) for start in first)
        spans = tuple(max(min(start + span, size) - lo, 0)
                      for start, span, size, lo in zip(first, around.extents, array.shape, low, strict=True))
        memory_box = (stmt.tensor.name, low, spans)
        other = state.conflict("get", memory_box)
        if other is not None:
            raise SimulationError(f"a get of {stmt.tensor.name} is issued while an overlapping {other.direction} "
                                  f"({other.local[0]}) is in flight: {format_stmt(stmt)[0]}")
        local[...] = values
        self.write(stmt.buffer.name, state)
        state.counters.dma_get_bytes += int(inside.sum()) * array.itemsize
        state.in_flight.setdefault(stmt.reply, []).append(_Flight("get", local_box, memory_box))

    @staticmethod
    def versions(state: _State, tensor: str) -> np.ndarray:
        if tensor not in state.versions:
            state.versions[tensor] = np.zeros(state.arrays[tensor].shape, np.int64)
        return state.versions[tensor]

    def visit_Call(self, stmt: Call, env: dict[str, int], state: _State) -> None:
        """Run a primitive on its tiles: the GEMM in float64, as the real one after its conversion."""
        views = {}
        for name, access in stmt.operands:
            buffer = state.buffers[access.name]
            extents = access.padded_extents()
            starts = self.box(access, env, buffer.shape, f"buffer {access.name}", stmt)  # padding included
            if state.busy((access.name, starts, extents)):
                raise SimulationError(f"{stmt.primitive} reads {name} from {access.name} before its DMA was "
                                      "waited for")
            views[name] = buffer[box_slices(starts, extents)]
        for call in (stmt, *stmt.epilogue):
            for role, access in call.operands:
                # An output is read only where the result combines into it (`+=`, not overwritten).
                if role != call.output_role or call.signature.reads_output() and not call.overwrite:
                    self.read(access.name, call.primitive, state)
        for _, access in stmt.operands:
            if access.name in self.twins:  # the primitive's float64 copy of the tile
                self.write(self.twins[access.name], state)
        for call in (stmt, *stmt.epilogue):
            self.write(call.output.name, state)
        run_call(stmt, views)
        state.counters.flops += stmt.flops
        state.counters.gemm_calls += stmt.signature.kind == "gemm"
        state.counters.calls += 1
        self.statements.visit(stmt, env, state.timeline)


def simulate(module: Module, arrays: dict[str, np.ndarray], machine: SW26010) -> Counters:
    """Run `module` on `arrays` (outputs updated in place) and return what it moved and computed and
    its simulated time (every statement timed as it executes, no extrapolation)."""
    sim = _Machine(module, machine)
    buffers, used = sim.allocate()
    state = _State(arrays, buffers, timeline=Timeline(machine))
    state.counters.ldm_bytes_per_cpe = used
    sim.visit(module.body, {}, state)
    if state.in_flight:
        raise SimulationError(f"the program ends with DMAs never waited for: {', '.join(sorted(state.in_flight))}")
    counters = state.counters
    timeline = state.timeline
    counters.dma_requests = int(timeline.stats["dma_requests"])
    counters.dma_transactions = int(timeline.stats["dma_transactions"])
    counters.seconds = timeline.seconds
    return counters
