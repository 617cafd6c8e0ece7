"""Local-memory planning (thesis 4.1.3 strategy 2, 5.1.2.3).

Guarantees: every local buffer has a per-CPE offset, 32-byte aligned (one 256-bit register). The
buffers of different statements of the compute block are never live at once, so each statement's
buffers start at the same place; `resident` buffers (values kept for later statements) come first and
overlap nothing. Within a statement, a buffer is live from its first to its last use in the innermost
loop body that holds them all (`live_ranges`): the peeled copies of a loop that run one after another
share local memory, at any depth. No two buffers that may be live at once overlap, and the
whole fits one CPE's usable local memory.
Each buffer a GEMM computes on gets a float64 copy (`<name>_double`, `LocalBuffer.copy_of`; one tile
even when the buffer is double buffered): the primitive converts single precision to double in LDM
when it is called and back before it returns, so a copy holds a value only during the calls on its
buffer, and the copies of calls that run one after another (the peeled copies') share local memory.
Raises `Rejected` when the buffers do not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from math import ceil, prod

from swauto.errors import Rejected
from swauto.ir.nodes import Alloc, Call, Dma, DmaWait, For, LocalBuffer, Module, Seq, Stmt, Zero, seq
from swauto.ir.visitor import walk
from swauto.machine import DTYPE_BYTES, LocalMemoryMachine

ALIGNMENT = 32


def per_cpe_bytes(buffer: LocalBuffer, machine: LocalMemoryMachine) -> int:
    """Bytes of `buffer` in each CPE: the mesh spreads the tile evenly over its CPEs."""
    return ceil(prod(buffer.shape) / machine.cpes) * DTYPE_BYTES[buffer.dtype]


def aligned(size: int) -> int:
    """`size` rounded up to the alignment of local buffers."""
    return ceil(size / ALIGNMENT) * ALIGNMENT


def _twins(module: Module, machine: LocalMemoryMachine) -> list[LocalBuffer]:
    """A float64 copy of each operand tile the primitive computes on (of the tile it sees, which is
    smaller than its buffer when the buffer holds a hoisted or double-buffered transfer)."""
    tiles: dict[str, tuple[int, ...]] = {}
    for node, _ in walk(module.body):
        if isinstance(node, Call) and node.signature.kind == "gemm":
            for _, access in node.operands:
                shape = tuple(e for e in access.padded_extents() if e > 1) or (1,)
                if prod(shape) > prod(tiles.get(access.name, (0,))):
                    tiles[access.name] = shape
    return [
        LocalBuffer(f"{buffer.name}_double", tiles[buffer.name], machine.gemm_compute_dtype,
                    statement=buffer.statement, copy_of=buffer.name, resident=buffer.resident)
        for buffer in module.buffers
        if buffer.name in tiles and buffer.dtype != machine.gemm_compute_dtype
    ]


def twin_bytes(module: Module, machine: LocalMemoryMachine) -> int:
    """Per-CPE local memory the float64 twins take at most at once: those of one GEMM call's operands
    (a twin holds a value only while a call on its buffer runs)."""
    sizes = {t.copy_of: aligned(per_cpe_bytes(t, machine)) for t in _twins(module, machine)}
    return max((sum(sizes.get(access.name, 0) for _, access in node.operands)
                for node, _ in walk(module.body) if isinstance(node, Call)), default=0)


def plan_local_memory(module: Module, machine: LocalMemoryMachine) -> Module:
    buffers = [b for b in module.buffers if b.copy_of is None]
    twins = _twins(replace(module, buffers=tuple(buffers)), machine)
    groups = dict.fromkeys(b.statement for b in buffers)
    ordered = [b for statement in groups for b in buffers + twins if b.statement == statement]
    live = live_ranges(replace(module, buffers=tuple(buffers + twins)))
    placed: dict[str, LocalBuffer] = {}
    resident = 0
    for buffer in (b for b in ordered if b.resident):
        placed[buffer.name] = replace(buffer, offset=resident)
        resident += aligned(per_cpe_bytes(buffer, machine))
    used = resident
    for buffer in (b for b in ordered if not b.resident):
        span = live[buffer.name]
        size = aligned(per_cpe_bytes(buffer, machine))
        # Lowest offset clear of every buffer of its statement live at the same time (first fit).
        taken = sorted((other.offset, other.offset + aligned(per_cpe_bytes(other, machine)))
                       for other in placed.values()
                       if not other.resident and other.statement == buffer.statement
                       and span.overlaps(live[other.name]))
        offset = resident
        for start, end in taken:
            if offset + size <= start:
                break
            offset = max(offset, end)
        placed[buffer.name] = replace(buffer, offset=offset)
        used = max(used, offset + size)
    if used > machine.ldm_usable_bytes:
        raise Rejected(
            "local memory overflow",
            f"{used} B per CPE needed, {machine.ldm_usable_bytes} B available",
        )
    return replace(module, buffers=tuple(placed[b.name] for b in ordered), body=_allocate_twins(module.body, twins))


@dataclass(frozen=True)
class LiveRange:
    """Where a local buffer may hold a value: statements `first` to `last` of the sequence at `scope`
    (the path of statement indices from the module's body down through loop bodies; () is the body)."""

    scope: tuple[int, ...]
    first: int
    last: int

    def overlaps(self, other: LiveRange) -> bool:
        if self.scope == other.scope:
            return self.first <= other.last and other.first <= self.last
        for outer, inner in ((self, other), (other, self)):
            depth = len(outer.scope)
            if len(inner.scope) > depth and inner.scope[:depth] == outer.scope:
                return outer.first <= inner.scope[depth] <= outer.last
        return False  # in different statements of a sequence that holds both scopes


def live_ranges(module: Module) -> dict[str, LiveRange]:
    """Per local buffer of `module`, where it may hold a value. A buffer is used by a transfer into
    or out of it, the wait for such a transfer, a zeroing, a call on it; it is live from its first to
    its last use in the innermost loop body that holds them all (so the peeled copies of a loop that
    run one after another share local memory, at every depth), widened to the whole loop while that
    loop's body does not write it before anything else uses it (iterations may carry its value;
    a use inside an `If` counts as a read). A buffer no statement uses is live throughout. A float64
    twin (`copy_of`) is used by the GEMM calls on its buffer, each of which writes it first."""
    top = _statements(module.body)
    twin_of = {b.copy_of: b.name for b in module.buffers if b.copy_of is not None}
    owner: dict[str, str] = {}  # reply -> the buffer its transfer moves
    uses: dict[str, list[tuple[tuple[int, ...], bool]]] = {}  # per buffer: (path, whether it writes first)

    def visit(stmts: tuple[Stmt, ...], path: tuple[int, ...]) -> None:
        for index, stmt in enumerate(stmts):
            here = (*path, index)
            if isinstance(stmt, For):
                visit(_statements(stmt.body), here)
                continue
            for node, _ in walk(stmt):
                if isinstance(node, Dma):
                    owner[node.reply] = node.buffer.name
                for name, writes in _used(node, owner):
                    uses.setdefault(name, []).append((here, writes and node is stmt))
                if isinstance(node, Call) and node.signature.kind == "gemm":
                    for _, access in node.operands:
                        if access.name in twin_of:
                            uses.setdefault(twin_of[access.name], []).append((here, node is stmt))

    visit(top, ())
    return {buffer.name: _range(uses[buffer.name]) if buffer.name in uses else LiveRange((), 0, max(0, len(top) - 1))
            for buffer in module.buffers}


def _statements(body: Stmt) -> tuple[Stmt, ...]:
    return body.stmts if isinstance(body, Seq) else (body,)


def _used(node: Stmt, owner: Mapping[str, str]) -> tuple[tuple[str, bool], ...]:
    """The buffers `node` uses, each with whether it writes the buffer without reading it (a get, a
    zeroing); `owner` gives the buffer of each reply a wait may wait for."""
    if isinstance(node, Dma):
        return ((node.buffer.name, node.direction == "get"),)
    if isinstance(node, DmaWait):
        return ((owner[node.reply], False),) if node.reply in owner else ()
    if isinstance(node, Zero):
        return ((node.buffer.name, True),)
    if isinstance(node, Call):
        return tuple((access.name, False) for call in (node, *node.epilogue) for _, access in call.operands)
    return ()


def _range(uses: list[tuple[tuple[int, ...], bool]]) -> LiveRange:
    """The live range of a buffer with these uses (`live_ranges`)."""
    paths = [path for path, _ in uses]
    common = 0
    while all(len(path) > common + 1 and path[common] == paths[0][common] for path in paths):
        common += 1
    # Inside a loop's body only if each iteration writes the buffer before it reads it.
    scope = paths[0][:common] if min(uses)[1] else ()
    inside = [path[len(scope)] for path in paths]
    return LiveRange(scope, min(inside), max(inside))


def _allocate_twins(body: Stmt, twins: list[LocalBuffer]) -> Stmt:
    """`body` with each twin's Alloc at the end of the run of Allocs that holds its buffer's."""
    if not twins:
        return body
    out: list[Stmt] = []
    run: set[str] = set()  # the buffers of the run of Allocs just before
    for stmt in [*body.stmts, Seq(())] if isinstance(body, Seq) else [body, Seq(())]:
        if isinstance(stmt, Alloc):
            run.add(stmt.buffer)
        elif run:
            out.extend(Alloc(twin.name) for twin in twins if twin.copy_of in run)
            run = set()
        out.append(stmt)
    return seq(*out[:-1])
