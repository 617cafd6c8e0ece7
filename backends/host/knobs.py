"""The host backend's own schedule knobs: the micro-kernel's register tile. The schedule space
explores the tiles this machine's calibration measured fastest (`Candidate.micro_kernel`, from
`host_model.Machine.register_tiles`, chosen among `register_tile_choices`); they shape code only
inside the backend (packing and the micro-kernel), never the IR."""

from __future__ import annotations

from dataclasses import dataclass

from swauto.machine import HOST_MICRO_KERNELS

from .isa import Isa

MIN_ACCUMULATORS = 8  # what hides an FMA's latency on two pipes


@dataclass(frozen=True)
class Knobs:
    """A register tile of `rows` broadcast elements by `vectors` vectors: rows * vectors accumulators;
    whether GEMMs may read and write in place (views of cache-resident tensors: `layout.plan`) C tiles
    whose register tiles' rows share L1 sets there (`output_views`), or copy those in and out; and whether
    tiles are views of tensors beyond the L3 too (`dram_views`), or copies there; each as calibration
    measured faster on this machine (`host_model.Machine.output_views`, `.dram_views`)."""

    rows: int
    vectors: int
    output_views: bool = True
    dram_views: bool = False

    def fits(self, isa: Isa) -> bool:
        """True when the accumulators fit the registers `accumulator_registers` leaves them."""
        return self.rows >= 1 and self.vectors >= 1 \
            and self.rows * self.vectors <= accumulator_registers(isa, self.vectors)

    def column_tiles(self, slots: int) -> tuple[tuple[int, int], ...]:
        """How the micro-kernel covers `slots` vectors of C's columns: runs of (vectors per tile, tiles), the
        fewest tiles of at most `vectors`, as even as they go (4 in tiles of 3: 2 + 2, not 3 + 1, whose
        one-vector edge takes 12 rows of broadcasts: on a Zen 3, 17 FMA slots a K step for 12 FMAs, and
        GEMMs 64 x 256 x 32 ran at 71 GFLOPS in the 4 x 3 tile, 90 in the 4 x 2)."""
        tiles = -(-slots // self.vectors)
        narrow, wider = divmod(slots, tiles)  # `wider` tiles take one vector more
        return tuple((vectors, count) for vectors, count in ((narrow + 1, wider), (narrow, tiles - wider)) if count)

    def rows_for(self, vectors: int, isa: Isa) -> int:
        """The rows of a register tile `vectors` wide (a column tile at the edge, or a whole GEMM,
        narrower than this tile's): as many accumulators as this tile has, so that it hides the FMA
        latency as well, within `isa`'s registers (this tile's rows where it is as wide)."""
        if vectors >= self.vectors:
            return self.rows
        return min(-(-self.rows * self.vectors // vectors), accumulator_registers(isa, vectors) // vectors)


def accumulator_registers(isa: Isa, vectors: int) -> int:
    """The vector registers of `isa` a register tile of `vectors` vectors has for its accumulators: all but one
    per vector of the vector operand, one for the broadcast element and, without FMA (a multiply, then an
    add), one for the product."""
    return isa.registers - vectors - 1 - (0 if isa.fma else 1)


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
        tiles |= {Knobs(rows, vectors) for rows in (most, (most + 1) // 2) if rows * vectors >= MIN_ACCUMULATORS}
    return tuple(sorted((tile for tile in tiles if tile.fits(isa)), key=lambda tile: (tile.vectors, tile.rows)))
