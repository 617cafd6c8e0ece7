"""A plain NumPy reference: the seed loop nest run directly, in float64, with no schedule at all."""

from __future__ import annotations

import numpy as np

from swauto.frontend.check import BoundOperator
from swauto.ir import expr as ex
from swauto.ir.memory import box_slices, matrix_view, store_matrix
from swauto.ir.nodes import Access, For, Gemm, Stmt


def reference(op: BoundOperator, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The operator's outputs (float64) for `arrays`, computed from the seed as written."""
    values = {name: array.astype(np.float64) for name, array in arrays.items()}

    def box(access: Access, env: dict[str, int]) -> np.ndarray:
        """The box as a view; a box reaching outside a (padded) tensor reads zeros there, as a copy."""
        array = values[access.name]
        starts = tuple(ex.evaluate(s, env) for s in access.starts)
        if all(0 <= s and s + e <= n for s, e, n in zip(starts, access.extents, array.shape, strict=True)):
            return array[box_slices(starts, access.extents)]
        padded = np.zeros(access.extents)
        inside = tuple(slice(max(s, 0), min(s + e, n)) for s, e, n in zip(starts, access.extents, array.shape,
                                                                          strict=True))
        target = tuple(slice(i.start - s, i.stop - s) for i, s in zip(inside, starts, strict=True))
        if all(i.stop > i.start for i in inside):
            padded[target] = array[inside]
        return padded

    def run(stmt: Stmt, env: dict[str, int]) -> None:
        if isinstance(stmt, For):
            start, stop = ex.evaluate(stmt.start, env), ex.evaluate(stmt.stop, env)
            for i in range(start, stop, stmt.stride):
                run(stmt.body, {**env, stmt.var: i})
            return
        assert isinstance(stmt, Gemm), "the seed is a loop nest around one primitive call"
        a = matrix_view(box(stmt.a, env), stmt.a.dims, "M", "K")
        b = matrix_view(box(stmt.b, env), stmt.b.dims, "K", "N")
        c_box = box(stmt.c, env)
        c = matrix_view(c_box, stmt.c.dims, "M", "N") + a @ b
        store_matrix(c_box, stmt.c.dims, "M", "N", c)

    run(op.seed.body, {})
    return {t.name: values[t.name] for t in op.seed.tensors if t.is_output}

