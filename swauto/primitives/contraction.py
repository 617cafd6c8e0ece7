"""The mesh-wide GEMM primitive (thesis chapter 4): `C += A x B` on tiles in local memory."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from swauto.primitives.registry import Primitive, register


def _gemm(views: Mapping[str, np.ndarray], constant: float | None) -> np.ndarray:
    # Views are [M, N, K]-shaped: A is [M, 1, K], B [1, N, K], C [M, N, 1].
    a, b, c = views["A"][:, 0, :], views["B"][0, :, :], views["C"]
    return c + (a @ b.T)[:, :, None]


GEMM = register(Primitive(
    name="gemm",
    kind="gemm",
    dims=("M", "N", "K"),
    inputs=(("A", ("M", "K")), ("B", ("K", "N"))),
    output=("C", ("M", "N")),
    combine="+",
    compute=_gemm,
    flops_per_point=2,
    vectorizable=("M", "N"),
    description="C += A x B (a matrix product added to C)",
))
