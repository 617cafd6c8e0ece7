"""Zeroed output tiles folded into the GEMM that fills them (`swauto.passes.fold_zeros`): a zeroing folds
only into a GEMM that writes exactly its box, unguarded, with nothing between them that names the
buffer; the host's candidates of an overwriting GEMM compute its result with their zeroings folded;
the SW26010 keeps its zeroings."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, relative_error, sample_legal
from swauto.api import load
from swauto.ir.expr import Const, Var
from swauto.ir.nodes import Access, Call, Compare, Dma, DmaWait, For, Module, Seq, Zero, gemm_call, seq
from swauto.ir.visitor import walk
from swauto.machine import SUNWAY, HostScratchpad
from swauto.passes.fold_zeros import fold_zeros
from swauto.pipeline import lower

OVERWRITING_GEMM = (EXAMPLES / "gemm.sw").read_text().replace("C += C", "C = C")


def _box(name: str, extents: tuple[int, int], dims: tuple[str, str], row: int = 0) -> Access:
    return Access(name, (Const(row), Const(0)), extents, dims)


C_TILE = _box("C_tile", (8, 16), ("M", "N"))
GEMM = gemm_call(8, 16, 4, _box("A_tile", (8, 4), ("M", "K")), _box("B_tile", (4, 16), ("K", "N")), C_TILE)
GET_A = (Dma("get", _box("A", (8, 4), ("M", "K")), _box("A_tile", (8, 4), ("M", "K")), "A_ready"), DmaWait("A_ready"))
OTHER_ROWS = For("i", Const(0), Const(2), 1, gemm_call(8, 16, 4, _box("A_tile", (8, 4), ("M", "K")),
                                                       _box("B_tile", (4, 16), ("K", "N")),
                                                       _box("D_tile", (8, 16), ("M", "N"))))
CASES = {
    "right after": ((), GEMM, True),
    "after a transfer of another buffer": (GET_A, GEMM, True),
    "after a loop over another tile": ((OTHER_ROWS,), GEMM, True),
    "after a get into the tile": ((Dma("get", _box("C", (8, 16), ("M", "N")), C_TILE, "C_ready"),
                                   DmaWait("C_ready")), GEMM, False),
    "filling other rows": ((), GEMM.with_operands(lambda role, a: _box("C_tile", (8, 16), ("M", "N"), 8)
                                                  if role == "C" else a), False),
    "guarded": ((), replace(GEMM, runs_if=(Compare(">=", Var("i"), Const(0)),)), False),
}


@pytest.mark.parametrize("case", CASES)
def test_a_zeroing_folds_only_into_a_gemm_that_writes_its_box_with_nothing_between_naming_it(case):
    between, gemm, folds = CASES[case]
    module = Module("m", (), (), Seq((Zero(C_TILE), *between, gemm)))
    folded = fold_zeros(module)
    if not folds:
        assert folded is module
        return
    assert folded.body == seq(*between, replace(gemm, overwrite=True))


def _zeroes_then_overwrites(module: Module) -> tuple[int, int]:
    """(zeroings, GEMMs that overwrite) in `module`."""
    nodes = [node for node, _ in walk(module.body)]
    return (sum(isinstance(n, Zero) for n in nodes),
            sum(isinstance(n, Call) and n.primitive == "gemm" and n.overwrite for n in nodes))


def test_host_candidates_of_an_overwriting_gemm_fold_their_zeroings_and_compute_the_product():
    """GEMM `C = A B` at odd sizes (peeled last tiles) on sampled host candidates: where K is one tile,
    each C tile's zeroing folds into its GEMM (none is left), where K is split none can; every one
    overwrites C with A B. The SW26010 lowers the same candidates with their zeroings."""
    params = {"M": 70, "N": 45, "K": 33}
    op, host = load(OVERWRITING_GEMM, params), HostScratchpad()
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape, dtype=np.float32) for shape in ((70, 33), (33, 45)))
    seen = set()
    for candidate in sample_legal(op, 8, 0, (host, SUNWAY)):
        stages = dict(lower(op, candidate, host))
        zeros, overwriting = _zeroes_then_overwrites(stages["plan_local_memory"])
        whole_k = dict(candidate.splits).get("K", 33) >= 33
        assert (zeros == 0 and overwriting > 0) if whole_k else overwriting == 0, candidate.describe()
        seen.add(whole_k)
        assert "fold_zeros" not in dict(lower(op, candidate, SUNWAY))
        c = rng.standard_normal((70, 45), dtype=np.float32)  # overwritten, never read
        swauto.compile(OVERWRITING_GEMM, params, target="host", schedule=candidate)(A=a, B=b, C=c)
        assert relative_error(c, a @ b) < 1e-5, candidate.describe()
    assert seen == {True, False}
