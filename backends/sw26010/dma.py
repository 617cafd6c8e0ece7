"""How the 64 CPEs move a box by DMA, and what the memory system charges for it.

The mesh spreads a tile as 8 x 8 blocks: each contiguous run of the box (its rows along the last
axis) is split evenly across the mesh columns when it can be, and each CPE moves its own pieces from
their real start addresses. A piece touching `l` 128-byte lines costs `l` memory transactions; the
bytes fetched beyond the piece are its *waste*. Tensors start 128-byte aligned.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from swauto.ir.memory import merged_rows, row_pieces, strided_box
from swauto.machine import SW26010


def lines_touched(first_byte: np.ndarray | int, size: int, line: int = 128) -> np.ndarray | int:
    """128-byte lines (memory transactions) a block of `size` bytes starting at `first_byte` touches."""
    return (first_byte + size - 1) // line - first_byte // line + 1


def block_waste(first_byte: int, size: int, line: int = 128) -> int:
    """Bytes a block fetches beyond its own: whole lines touched minus its size."""
    return int(lines_touched(first_byte, size, line)) * line - size


def mesh_blocks(starts: tuple[int, ...], extents: tuple[int, ...], shape: tuple[int, ...],
                element_bytes: int, mesh_columns: int, steps: tuple[int, ...] = (), flat: bool = False,
                cpes: int = 64, walks: tuple[int, ...] = ()) -> tuple[np.ndarray, int]:
    """The first byte of every block the CPEs move for this box (stepping by `steps`), and the (common)
    block size in bytes.

    For the GEMM's mesh layout, each row of the box (a run along the last axis; one element where
    that axis is strided) is split into `mesh_columns` equal pieces when its length is a multiple of
    that (each mesh column takes one), else moved whole by one CPE. For a data-parallel (`flat`)
    buffer the rows are the box's contiguous runs, cut so that each CPE moves about one block
    (`swauto.ir.memory.row_pieces`).
    """
    if flat:
        assert not any(starts), "merged rows are relative to the box's first element"
        shape, extents, steps = merged_rows(shape, extents, steps, walks)
        starts = (0,) * len(extents)
    strides, extents = strided_box(shape, extents, steps, walks)
    starts = starts + (0,) * (len(extents) - len(starts))
    row_starts = np.zeros(1, dtype=np.int64)
    for start, extent, stride in zip(starts[:-1], extents[:-1], strides[:-1], strict=True):
        row_starts = (row_starts[:, None] + (start + np.arange(extent, dtype=np.int64)) * stride).ravel()
    row_starts = row_starts + starts[-1]
    run = extents[-1]
    pieces = row_pieces(run, row_starts.size, flat, mesh_columns, cpes)
    piece = run // pieces
    first = (row_starts[:, None] + np.arange(pieces, dtype=np.int64) * piece).ravel() * element_bytes
    return first, piece * element_bytes


@dataclass(frozen=True)
class TransferCost:
    """What one mesh-wide DMA statement moves and how long the memory system is busy with it."""

    bytes: int
    blocks: int
    transactions: int
    requests: int  # CPEs taking part
    service_cycles: float  # time the transfer occupies the memory system once it has started


def service_cycles(transactions: int, blocks: int, nbytes: int, machine: SW26010) -> float:
    """Cycles the memory system needs for a transfer: the memory controller serves 128-byte
    transactions at `peak_bandwidth`, the transfer network serves each block at a fixed overhead
    plus its bytes at `dma_network_bandwidth`; the slower of the two paths sets the pace (they
    pipeline), shared by all 64 CPEs."""
    clock = machine.clock_hz
    controller = transactions * machine.dma_transaction_bytes / machine.peak_bandwidth * clock
    network = blocks * machine.dma_block_overhead_cycles + nbytes / machine.dma_network_bandwidth * clock
    return max(controller, network)


@lru_cache(maxsize=1 << 16)
def transfer_cost(shape: tuple[int, ...], extents: tuple[int, ...], base_residue: int, element_bytes: int,
                  machine: SW26010, steps: tuple[int, ...] = (), flat: bool = False,
                  walks: tuple[int, ...] = ()) -> TransferCost:
    """Cost of moving a box with `extents` of a row-major tensor of `shape` whose first element sits
    `base_residue` bytes past a 128-byte boundary (every block's alignment follows from it).

    Cached: the loop nest repeats the same few (shape, extents, alignment) many times."""
    # Offsets relative to the box's first element, shifted by its residue in bytes.
    first, size = mesh_blocks((0,) * len(extents), extents, shape, element_bytes, machine.mesh_columns, steps, flat,
                              machine.cpes, walks)
    return blocks_cost(first + base_residue, size, machine)


def blocks_cost(first: np.ndarray, size: int, machine: SW26010) -> TransferCost:
    """Cost of one mesh-wide DMA of a block of `size` bytes at each of the byte offsets `first`
    (relative to a 128-byte boundary)."""
    transactions = int(lines_touched(first, size, machine.dma_transaction_bytes).sum())
    blocks = int(first.size)
    nbytes = blocks * size
    return TransferCost(nbytes, blocks, transactions, min(blocks, machine.cpes),
                        service_cycles(transactions, blocks, nbytes, machine))
