"""Local-memory planning (thesis 4.1.3 strategy 2, 5.1.2.3).

Guarantees: every local buffer has a per-CPE offset, 32-byte aligned (one 256-bit register). The
buffers of different statements of the compute block are never live at once, so each statement's
buffers start at the same place; `resident` buffers (values kept for later statements) come first and
overlap nothing. No two buffers that may be live at once overlap, and the whole fits one CPE's
usable local memory.
Each buffer a GEMM computes on gets a float64 copy (`<name>_double`, `LocalBuffer.copy_of`; one tile
even when the buffer is double buffered): the primitive converts single precision to double in LDM.
Raises `Rejected` when the buffers do not fit.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil, prod

from swauto.errors import Rejected
from swauto.ir.nodes import Alloc, Call, LocalBuffer, Module, Seq, Stmt, seq
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


def footprint(module: Module, machine: LocalMemoryMachine, doubling: bool = False) -> int:
    """Per-CPE local memory the module's buffers and their float64 twins need; with `doubling`,
    as if every float32 buffer were double buffered (for passes that run before double buffering)."""
    factor = 2 if doubling else 1
    own = sum(aligned(per_cpe_bytes(b, machine)) * factor for b in module.buffers)
    return own + sum(aligned(per_cpe_bytes(t, machine)) for t in _twins(module, machine))


def plan_local_memory(module: Module, machine: LocalMemoryMachine) -> Module:
    buffers = [b for b in module.buffers if b.copy_of is None]
    twins = _twins(replace(module, buffers=tuple(buffers)), machine)
    groups = dict.fromkeys(b.statement for b in buffers)
    ordered = [b for statement in groups for b in buffers + twins if b.statement == statement]
    placed: dict[str, LocalBuffer] = {}
    resident = 0
    for buffer in (b for b in ordered if b.resident):
        placed[buffer.name] = replace(buffer, offset=resident)
        resident += aligned(per_cpe_bytes(buffer, machine))
    ends = dict.fromkeys(groups, resident)  # per statement, where its next buffer goes
    for buffer in (b for b in ordered if not b.resident):
        placed[buffer.name] = replace(buffer, offset=ends[buffer.statement])
        ends[buffer.statement] += aligned(per_cpe_bytes(buffer, machine))
    used = max(ends.values(), default=resident)
    if used > machine.ldm_usable_bytes:
        raise Rejected(
            "local memory overflow",
            f"{used} B per CPE needed, {machine.ldm_usable_bytes} B available",
        )
    return replace(module, buffers=tuple(placed[b.name] for b in ordered), body=_allocate_twins(module.body, twins))


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
