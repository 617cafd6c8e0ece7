"""The host backend's own schedule knobs, below the IR's schedule space: the micro-kernel's register
tile. They shape code only inside the backend (packing and the micro-kernel), never the IR."""

from __future__ import annotations

from dataclasses import dataclass

from .isa import Isa


@dataclass(frozen=True)
class Knobs:
    """A register tile of `rows` broadcast elements by `vectors` vectors: rows * vectors accumulators."""

    rows: int
    vectors: int

    def fits(self, isa: Isa) -> bool:
        """True when the accumulators, one vector per B vector and a broadcast register fit the
        register file."""
        return self.rows >= 1 and self.vectors >= 1 and self.rows * self.vectors + self.vectors + 1 <= isa.registers


DEFAULTS = {"avx512": Knobs(6, 4), "avx2": Knobs(6, 2), "generic": Knobs(4, 2)}


def default_knobs(isa: Isa) -> Knobs:
    return DEFAULTS[isa.name]


def default_register_tile() -> tuple[int, int]:
    """(rows, columns) of the default micro-kernel of the instruction set the host compiles for."""
    from .isa import select

    isa = select()
    knobs = default_knobs(isa)
    return knobs.rows, knobs.vectors * isa.width
