"""A plain NumPy reference: the seed's statements run directly, in float64, with no schedule at all."""

from __future__ import annotations

import numpy as np

from swauto.frontend.check import BoundOperator
from swauto.ir import expr as ex
from swauto.ir.memory import box_slices
from swauto.ir.nodes import Access, Call, For, Seq, Stmt
from swauto.ir.visitor import Visitor
from swauto.passes.init_outputs import init_outputs
from swauto.primitives.semantics import run_call


def reference(op: BoundOperator, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The operator's outputs (float64) for `arrays`, computed from the seed as written (operator-local
    tensors start as zeros)."""
    values = {name: array.astype(np.float64) for name, array in arrays.items()}
    for tensor in op.seed.tensors:
        values.setdefault(tensor.name, np.zeros(tensor.shape))

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

    class Run(Visitor):
        def visit_Seq(self, stmt: Seq, env: dict[str, int]) -> None:
            for child in stmt.stmts:
                self.visit(child, env)

        def visit_For(self, stmt: For, env: dict[str, int]) -> None:
            start, stop = ex.evaluate(stmt.start, env), ex.evaluate(stmt.stop, env)
            for i in range(start, stop, stmt.stride):
                self.visit(stmt.body, {**env, stmt.var: i})

        def visit_Call(self, stmt: Call, env: dict[str, int]) -> None:
            run_call(stmt, {role: box(access, env) for role, access in stmt.operands})

        def generic_visit(self, stmt: Stmt, env: dict[str, int]) -> None:
            raise AssertionError(f"the seed is a sequence of loop nests around primitive calls, not {stmt!r}")

    Run().visit(init_outputs(op.seed, in_tiles=False).body, {})
    return {t.name: values[t.name] for t in op.seed.tensors if t.is_output}
