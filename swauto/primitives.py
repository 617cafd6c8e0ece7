"""The tensorized primitives a `.sw` seed can call, described by their signatures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrimitiveSignature:
    """Size arguments, matrix operands (with the dimensions each one carries), outputs, and the
    dimensions the primitive can vectorize."""

    name: str
    sizes: tuple[str, ...]
    operands: tuple[tuple[str, tuple[str, ...]], ...]
    outputs: tuple[str, ...]
    vectorizable: tuple[str, ...]

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.sizes + tuple(name for name, _ in self.operands)

    def operand_dims(self, operand: str) -> tuple[str, ...]:
        return dict(self.operands)[operand]


GEMM = PrimitiveSignature(
    name="gemm",
    sizes=("M", "N", "K"),
    operands=(("A", ("M", "K")), ("B", ("K", "N")), ("C", ("M", "N"))),
    outputs=("C",),
    vectorizable=("M", "N"),
)

PRIMITIVES: dict[str, PrimitiveSignature] = {GEMM.name: GEMM}
