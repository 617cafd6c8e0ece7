"""Small constant-matrix transforms along one axis (Winograd F(2x2, 3x3), thesis 5.1.3): `Z = T X`.

A transform's dimensions are I (its output rows), J (its input rows, reduced), and M and N (every
other point, broadcast: the tile's other axes, several of them merged into one where loops are
fused). M is optional; with it, X and Z may carry M and N in different memory orders, so a transform
can also transpose its tile's other axes (Winograd's channel and batch axes, into the order its
GEMMs want). Its matrix is part of the primitive, so a two-sided transform such as Bᵀ d B is two
calls, one along each axis of the tile. F(2x2, 3x3) and F(4x4, 3x3) are both here.
Adding a matrix is one `_transform` line here.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from swauto.primitives.registry import Primitive, register

Matrix = tuple[tuple[float, ...], ...]


def _transform(name: str, matrix: Matrix, description: str) -> Primitive:
    array = np.array(matrix, dtype=np.float64)
    nonzeros = int(np.count_nonzero(array))
    rows, columns = array.shape

    def compute(views: Mapping[str, np.ndarray], value: float | None) -> np.ndarray:
        x = views["X"]  # [1, J, M, N] (dims in order I, J, M, N)
        return np.einsum("ij,jmn->imn", array, x[0])[:, None, :, :]

    return register(Primitive(
        name=name, kind="transform", dims=("I", "J", "M", "N"), inputs=(("X", ("J", "M", "N")),),
        output=("Z", ("I", "M", "N")),
        combine="", compute=compute, flops_per_point=2 * nonzeros / (rows * columns), description=description,
        # Per point of I x J x N: one vector FMA (or add) per nonzero of the matrix, spread over its entries.
        cost={"matrix": matrix, "sizes": {"I": rows, "J": columns}, "sw26010_p0": nonzeros / (rows * columns)},
    ))


# F(2x2, 3x3) (Lavin and Gray; thesis 5.1.3): input Bᵀ d B, filter G g Gᵀ, output Aᵀ m A.
WINOGRAD_INPUT = _transform("winograd_input", ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
                            "Z = Bᵀ X along one axis (4 x 4)")
WINOGRAD_FILTER = _transform("winograd_filter", ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
                             "Z = G X along one axis (4 x 3)")
WINOGRAD_OUTPUT = _transform("winograd_output", ((1, 1, 1, 0), (0, 1, -1, -1)), "Z = Aᵀ X along one axis (2 x 4)")

# F(4x4, 3x3) (Lavin and Gray): 6 x 6 input tiles overlapping by 2, 36 multiplications per 16 outputs
# and channel pair where F(2x2, 3x3) takes 16 per 4; larger constants, so float32 rounds a little more.
WINOGRAD4_INPUT = _transform("winograd4_input", ((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
                                                 (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1)),
                             "Z = Bᵀ X along one axis (6 x 6, F(4x4, 3x3))")
WINOGRAD4_FILTER = _transform("winograd4_filter", ((1 / 4, 0, 0), (-1 / 6, -1 / 6, -1 / 6), (-1 / 6, 1 / 6, -1 / 6),
                                                   (1 / 24, 1 / 12, 1 / 6), (1 / 24, -1 / 12, 1 / 6), (0, 0, 1)),
                              "Z = G X along one axis (6 x 3, F(4x4, 3x3))")
WINOGRAD4_OUTPUT = _transform("winograd4_output", ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0),
                                                   (0, 1, -1, 8, -8, 1)),
                              "Z = Aᵀ X along one axis (4 x 6, F(4x4, 3x3))")
