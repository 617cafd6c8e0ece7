"""The host backend's own schedule knobs: the micro-kernel's register tile. The schedule space
explores the tiles this machine's calibration measured fastest (`Candidate.micro_kernel`, from
`host_model.Machine.register_tiles`, chosen among `register_tile_choices`); they shape code only
inside the backend (packing and the micro-kernel), never the IR."""

from __future__ import annotations

from dataclasses import dataclass

from swauto.machine import HOST_MICRO_KERNELS

from .isa import Isa


@dataclass(frozen=True)
class Knobs:
    """A register tile of `rows` broadcast elements by `vectors` vectors: rows * vectors accumulators;
    and whether GEMMs may read and write in place (views of cache-resident tensors: `layout.plan`) C tiles
    whose register tiles' rows share L1 sets there (`output_views`), or copy those in and out, whichever
    calibration measured faster on this machine (`host_model.Machine.output_views`)."""

    rows: int
    vectors: int
    output_views: bool = True

    def fits(self, isa: Isa) -> bool:
        """True when the accumulators, one vector per B vector and a broadcast register fit the
        register file."""
        return self.rows >= 1 and self.vectors >= 1 and self.rows * self.vectors + self.vectors + 1 <= isa.registers

    def column_tiles(self, slots: int) -> tuple[tuple[int, int], ...]:
        """How the micro-kernel covers `slots` vectors of C's columns: `even_tiles` of at most `vectors` (4
        in tiles of 3: 2 + 2, not 3 + 1, whose one-vector edge takes 12 rows of broadcasts: on a Zen 3, 17
        FMA slots a K step for 12 FMAs, and GEMMs 64 x 256 x 32 ran at 71 GFLOPS in the 4 x 3 tile, 90 in
        the 4 x 2)."""
        return even_tiles(slots, self.vectors)

    def rows_for(self, vectors: int, registers: int) -> int:
        """The rows of a register tile `vectors` wide (a column tile at the edge, or a whole GEMM,
        narrower than this tile's): as many accumulators as this tile has, so that it hides the FMA
        latency as well, within `registers` (this tile's rows where it is as wide)."""
        if vectors >= self.vectors:
            return self.rows
        return min(-(-self.rows * self.vectors // vectors), (registers - vectors - 1) // vectors)


def even_tiles(total: int, most: int) -> tuple[tuple[int, int], ...]:
    """`total` cut into the fewest tiles of at most `most`, as even as they go: runs of (size, tiles),
    the larger size first, sizes one apart."""
    tiles = -(-total // most)
    narrow, wider = divmod(total, tiles)  # `wider` tiles take one more
    return tuple((size, count) for size, count in ((narrow + 1, wider), (narrow, tiles - wider)) if count)


def row_tiles(total: int, most: int) -> tuple[tuple[int, int], ...]:
    """How the micro-kernel cuts `total` rows of a column tile into row tiles of at most `most`: runs of
    (rows, tiles). Whole tiles and one of the rows left over; but fewer than two tiles' worth as two
    tiles as even as they go (8 rows of a 6-row tile: 4 + 4, not 6 + 2, whose 2-row tile has too few
    accumulators to hide the FMA latency). Measured in turns on a Zen 3 (6 x 2 tiles, K = 256, 192
    columns): 8 rows 1.11x as fast as 6 + 2; but 32 rows as 2 x 6 + 4 x 5 0.96x as fast as 5 x 6 + 2,
    and 56 and 128 rows likewise 0.99x (14 and 64 a tie): among many full tiles the out-of-order core
    overlaps a short tile's latency with its neighbours'."""
    if total < 2 * most:
        return even_tiles(total, most)
    whole, rest = divmod(total, most)
    return tuple((rows, count) for rows, count in ((most, whole), (rest, 1)) if rows and count)


def default_knobs(isa: Isa) -> Knobs:
    """The register tile of `isa` a kernel without a chosen one gets (`HOST_MICRO_KERNELS`'s first)."""
    return Knobs(*HOST_MICRO_KERNELS[isa.name][0])


def register_tile_choices(isa: Isa) -> tuple[Knobs, ...]:
    """The register tiles calibration measures for `isa`: for 2 to 5 vectors, the most rows that fit
    the register file and about half as many (fewer rows stream less of the broadcast operand per
    vector loaded), besides the default tiles; only tiles with enough accumulators to hide an FMA's
    latency on two pipes (8)."""
    tiles = {Knobs(*tile) for tile in HOST_MICRO_KERNELS[isa.name]}
    for vectors in range(2, 6):
        most = (isa.registers - vectors - 1) // vectors
        tiles |= {Knobs(rows, vectors) for rows in (most, (most + 1) // 2) if rows * vectors >= 8}
    return tuple(sorted((tile for tile in tiles if tile.fits(isa)), key=lambda tile: (tile.vectors, tile.rows)))
