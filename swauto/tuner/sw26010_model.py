"""The thesis' analytic performance model of a candidate on one SW26010 core group (3.2.2, 4.2.3, 6.2.5).

- A DMA statement costs `T_latency + sum over its blocks of (block size + waste) / PEAK_BW` (equations
  3-1 and 3-2 with the 64 CPEs' shares summed: each CPE has PEAK_BW / #CPE), the waste of a block being
  the bytes that round it to whole 128-byte transactions from its start address, but never less than
  its blocks' bytes over the bandwidth measured on the real machine for that block size (swGEMM's
  implementation of the model looks it up the same way, `MBW_map`). The blocks are the box's rows
  split across the 8 mesh columns; addresses are those of the loop nest's first iteration.
- A GEMM primitive call costs `a*K + b*K*M/(vecM*4) + c*K*M*N/4 + d` (equation 4-2), M the vectorized
  dimension, vecM its register block; the coefficients are fitted by least squares (`fit_gemm`).
- A candidate costs `T_DMA + T_compute` single buffered. Double buffered, `max(T_DMA, T_compute)` is
  applied loop by loop (thesis 3.2.2 leaves the overlap term to the program's structure): an iteration
  of a loop costs max(its own gets, the rest of its body) plus its write-backs, which the next
  iteration waits for before it prefetches; the total is never below T_DMA (one memory controller),
  plus the prologue's transfers. With one loop level this is the thesis' `max(T_DMA, T_compute)`.

It reads only the IR and the machine description, never a simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import prod

import numpy as np

from swauto.ir import expr as ex
from swauto.ir.analysis import trip_count
from swauto.ir.memory import row_major_strides
from swauto.ir.nodes import Dma, For, Gemm, If, Module, Seq, Stmt
from swauto.ir.visitor import walk
from swauto.machine import DTYPE_BYTES, SW26010


@dataclass(frozen=True)
class ModelEstimate:
    """The model's figures for one candidate, in seconds: all transfers, all primitive calls, the
    prologue's transfers, and the total (`seconds`: T_DMA + T_compute single buffered; double
    buffered, the nest timed loop by loop with max(T_DMA, T_compute) per iteration, plus the
    prologue, and never below T_DMA plus the prologue)."""

    dma_seconds: float
    compute_seconds: float
    prologue_seconds: float
    overlapped: bool
    seconds: float


def measured_bandwidth(block_bytes: int, machine: SW26010) -> float:
    """Bytes per second the measured table gives for blocks of this size (the nearest entry at or above
    it; the last entry beyond the table), capped at PEAK_BW."""
    step = machine.dma_measured_block_step
    table = machine.dma_measured_mbps
    index = min(max(-(-block_bytes // step), 1), len(table)) - 1
    return min(table[index] * 1e6, machine.peak_bandwidth)


@lru_cache(maxsize=1 << 14)
def transfer_bytes(shape: tuple[int, ...], extents: tuple[int, ...], base_residue: int, element_bytes: int,
                   mesh_columns: int, line: int) -> tuple[int, int, int]:
    """Sum over the blocks of a box of (block size + waste), the bytes the memory system fetches; the
    block size in bytes; the number of blocks.

    `base_residue` is the box's first byte modulo the transaction size; the blocks are its rows (runs
    along the last axis), split in `mesh_columns` pieces when a row divides evenly."""
    strides = row_major_strides(shape)
    residues = np.zeros(1, dtype=np.int64)
    for extent, stride in zip(extents[:-1], strides[:-1], strict=True):
        step = stride * element_bytes % line
        residues = (residues[:, None] + np.arange(extent) * step).ravel() % line
    run = extents[-1]
    pieces = mesh_columns if run % mesh_columns == 0 and run >= mesh_columns else 1
    size = run // pieces * element_bytes
    first = (base_residue + residues[:, None] + np.arange(pieces) * size).ravel()
    lines = (first + size - 1) // line - first // line + 1
    return int(lines.sum()) * line, size, int(first.size)


def dma_seconds(shape: tuple[int, ...], starts: Sequence[int], extents: tuple[int, ...], element_bytes: int,
                machine: SW26010) -> float:
    """Equations 3-1/3-2 for one mesh-wide transfer of a box of a row-major tensor."""
    base = sum(s * t for s, t in zip(starts, row_major_strides(shape), strict=True)) * element_bytes
    line = machine.dma_transaction_bytes
    fetched, block, blocks = transfer_bytes(shape, extents, base % line, element_bytes, machine.mesh_columns, line)
    moving = max(fetched / machine.peak_bandwidth, blocks * block / measured_bandwidth(block, machine))
    return machine.dma_latency_cycles / machine.clock_hz + moving


def gemm_features(m: int, n: int, k: int, vectorize: str | None, machine: SW26010) -> tuple[float, ...]:
    """The terms of equation 4-2 for one call: (K, K*M/(vecM*4), K*M*N/4, 1), M the vectorized dimension."""
    vec, other = (n, m) if vectorize == "N" else (m, n)
    return (k, k * vec / (machine.gemm_register_block_vectorized * 4), k * vec * other / 4, 1.0)


def gemm_seconds(m: int, n: int, k: int, vectorize: str | None, machine: SW26010) -> float:
    """Equation 4-2 with the fitted coefficients of the machine description."""
    coefficients = (machine.gemm_fit_a, machine.gemm_fit_b, machine.gemm_fit_c, machine.gemm_fit_d)
    return sum(c * x for c, x in zip(coefficients, gemm_features(m, n, k, vectorize, machine), strict=True))


def fit_gemm(samples: Sequence[tuple[tuple[float, ...], float]]) -> tuple[float, float, float, float]:
    """Least-squares coefficients (a, b, c, d) of equation 4-2 from (features, seconds) samples.

    Residuals are relative (each row divided by its time), so short calls count as much as long ones.
    Exact when the samples follow the equation."""
    features = np.array([f for f, _ in samples], dtype=float)
    seconds = np.array([s for _, s in samples], dtype=float)
    coefficients, *_ = np.linalg.lstsq(features / seconds[:, None], np.ones_like(seconds), rcond=None)
    a, b, c, d = (float(x) for x in coefficients)
    return a, b, c, d


def _first_iteration(loops: tuple[For, ...]) -> dict[str, int]:
    env: dict[str, int] = {}
    for loop in loops:
        env[loop.var] = ex.compiled(loop.start)(env)
    return env


def _dma_time(node: Dma, loops: tuple[For, ...], module: Module, machine: SW26010) -> float:
    tensor = module.tensor(node.tensor.name)
    env = _first_iteration(loops)
    starts = [ex.compiled(s)(env) for s in node.tensor.starts]
    return dma_seconds(tensor.shape, starts, node.tensor.extents, DTYPE_BYTES[tensor.dtype], machine)


class _Nest:
    """Times of a double-buffered loop nest with each transfer written once, one statement at a time."""

    def __init__(self, module: Module, machine: SW26010) -> None:
        self.module = module
        self.machine = machine

    def time(self, stmt: Stmt, loops: tuple[For, ...]) -> float:
        """Seconds for one execution of `stmt` inside `loops`."""
        if isinstance(stmt, Gemm):
            return gemm_seconds(stmt.m, stmt.n, stmt.k, stmt.vectorize, self.machine)
        if isinstance(stmt, Dma):
            return _dma_time(stmt, loops, self.module, self.machine)
        if isinstance(stmt, Seq):
            return sum(self.time(child, loops) for child in stmt.stmts)
        if isinstance(stmt, If):
            branches = (stmt.then,) if stmt.otherwise is None else (stmt.then, stmt.otherwise)
            return max(self.time(branch, loops) for branch in branches)
        if isinstance(stmt, For):
            return trip_count(stmt) * self.iteration(stmt, loops + (stmt,))
        return 0.0  # Let, Alloc, Zero, DmaWait

    def iteration(self, loop: For, loops: tuple[For, ...]) -> float:
        """One iteration of `loop`. Double buffered, its own gets overlap the rest of the body
        (max(T_DMA, T_compute) per iteration), and its write-backs are exposed: the next iteration
        waits for them before it prefetches into that half."""
        children = loop.body.stmts if isinstance(loop.body, Seq) else (loop.body,)
        gets = puts = work = 0.0
        for child in children:
            if isinstance(child, Dma):
                if child.direction == "get":
                    gets += self.time(child, loops)
                else:
                    puts += self.time(child, loops)
            else:
                work += self.time(child, loops)
        return max(work, gets) + puts


def estimate(module: Module, final: Module, double_buffered: bool, machine: SW26010) -> ModelEstimate:
    """The model's time for a candidate: `module` is its IR with each transfer written once (before
    double buffering), `final` the IR that runs (its transfers outside every loop are the prologue)."""
    dma = compute = 0.0
    for node, loops in walk(module.body):
        if isinstance(node, Dma):
            dma += prod(trip_count(loop) for loop in loops) * _dma_time(node, loops, module, machine)
        elif isinstance(node, Gemm):
            trips = prod(trip_count(loop) for loop in loops)
            compute += trips * gemm_seconds(node.m, node.n, node.k, node.vectorize, machine)
    prologue = 0.0
    if double_buffered:
        prologue = sum(_dma_time(node, loops, final, machine) for node, loops in walk(final.body)
                       if isinstance(node, Dma) and not loops and node.direction == "get")
        body = module.body.stmts if isinstance(module.body, Seq) else (module.body,)
        # Transfers outside every loop are the prologue (counted once, from the final IR).
        nest = _Nest(module, machine)
        # One memory controller: never faster than all transfers back to back.
        seconds = max(sum(nest.time(child, ()) for child in body if not isinstance(child, Dma)), dma) + prologue
    else:
        seconds = dma + compute
    return ModelEstimate(dma, compute, prologue, double_buffered, seconds)
