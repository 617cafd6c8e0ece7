"""The host backend's own schedule knobs: the micro-kernel's register tile. The schedule space
explores them (`Candidate.micro_kernel`, from the machine description's `HOST_MICRO_KERNELS`); they
shape code only inside the backend (packing and the micro-kernel), never the IR."""

from __future__ import annotations

from dataclasses import dataclass

from swauto.machine import HOST_MICRO_KERNELS

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


def default_knobs(isa: Isa) -> Knobs:
    """The first register tile the machine description lists for `isa`."""
    return Knobs(*HOST_MICRO_KERNELS[isa.name][0])


def knobs_of(micro_kernel: tuple[int, int] | None) -> Knobs | None:
    """The knobs a candidate's `micro_kernel` (rows, vectors) asks for; None: the default."""
    return None if micro_kernel is None else Knobs(*micro_kernel)
