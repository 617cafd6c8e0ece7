"""Local-memory planning (thesis 4.1.3 strategy 2, 5.1.2.3).

Guarantees: every local buffer has a per-CPE offset, 32-byte aligned (one 256-bit register), with no
overlap, and the sum fits one CPE's usable local memory. Each buffer a primitive computes on gets a
float64 twin (`<name>_double`): the primitive converts single precision to double inside LDM.
Raises `Rejected` when the buffers do not fit.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import takewhile
from math import ceil

from swauto.errors import Rejected
from swauto.ir.nodes import Alloc, Gemm, LocalBuffer, Module, Seq, seq
from swauto.ir.visitor import walk
from swauto.machine import DTYPE_BYTES, SW26010

ALIGNMENT = 32


def per_cpe_bytes(buffer: LocalBuffer, machine: SW26010) -> int:
    """Bytes of `buffer` in each CPE: the mesh spreads the tile evenly over its CPEs."""
    elements = 1
    for extent in buffer.shape:
        elements *= extent
    return ceil(elements / machine.cpes) * DTYPE_BYTES[buffer.dtype]


def plan_local_memory(module: Module, machine: SW26010) -> Module:
    computed_on = {
        access.name for node, _ in walk(module.body) if isinstance(node, Gemm) for _, access in node.operands
    }
    buffers = [b for b in module.buffers if not b.name.endswith("_double")]
    twins = [
        LocalBuffer(f"{b.name}_double", b.shape, machine.gemm_compute_dtype)
        for b in buffers
        if b.name in computed_on and b.dtype != machine.gemm_compute_dtype
    ]
    placed = []
    offset = 0
    for buffer in buffers + twins:
        placed.append(replace(buffer, offset=offset))
        offset += ceil(per_cpe_bytes(buffer, machine) / ALIGNMENT) * ALIGNMENT
    if offset > machine.ldm_usable_bytes:
        raise Rejected(
            "local memory overflow",
            f"{offset} B per CPE needed, {machine.ldm_usable_bytes} B available",
        )
    statements = module.body.stmts if isinstance(module.body, Seq) else (module.body,)
    allocs = len(list(takewhile(lambda stmt: isinstance(stmt, Alloc), statements)))
    body = seq(*statements[:allocs], *(Alloc(twin.name) for twin in twins), *statements[allocs:])
    return replace(module, buffers=tuple(placed), body=body)
