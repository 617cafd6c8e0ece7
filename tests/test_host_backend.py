"""The host backend: every legal GEMM candidate computes C + A B at several shapes; hand-built modules
exercise a transposed operand layout and every statement and operator; equal modules share one
compiled program; failures are CodegenErrors."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from conftest import GEMM_SW, gemm_inputs, gemm_reference, relative_error
from swauto.backends.host import HostProgram, compile_module
from swauto.backends.host.codegen import generate
from swauto.errors import CodegenError
from swauto.frontend.check import check
from swauto.frontend.parser import parse
from swauto.frontend.source import Source
from swauto.ir.expr import BinOp, Const, Var
from swauto.ir.nodes import (
    Access,
    Alloc,
    Compare,
    Dma,
    DmaWait,
    For,
    Gemm,
    If,
    Let,
    LocalBuffer,
    Module,
    Seq,
    Tensor,
)
from swauto.machine import SUNWAY
from swauto.schedule.space import explore

SHAPES = [(256, 384, 128), (128, 128, 64), (384, 256, 96)]  # (M, N, K)
TOLERANCE = 1e-5


@cache
def legal_modules(shape: tuple[int, int, int]) -> dict[str, Module]:
    """The final IR of every legal candidate of examples/gemm.sw at `shape`, by candidate id."""
    source = Source.load(GEMM_SW)
    op = check(parse(source), source, dict(zip("MNK", shape, strict=True)))
    return {candidate.id: stages[-1][1] for candidate, stages in explore(op, SUNWAY).legal}


CASES = [(shape, candidate) for shape in SHAPES for candidate in legal_modules(shape)]


@pytest.mark.parametrize(
    ("shape", "candidate"), CASES, ids=[f"{'x'.join(map(str, s))}-{c}" for s, c in CASES]
)
def test_every_legal_candidate_computes_gemm(shape, candidate):
    program = compile_module(legal_modules(shape)[candidate])
    arrays = gemm_inputs(*shape)
    expected = gemm_reference(arrays)
    program.run(arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


def test_inputs_are_left_alone_and_code_is_optimised_llvm_ir():
    module = legal_modules((128, 128, 64))[next(iter(legal_modules((128, 128, 64))))]
    arrays = gemm_inputs(128, 128, 64)
    a, b = arrays["A"].copy(), arrays["B"].copy()
    program = compile_module(module)
    program.run(arrays)
    assert np.array_equal(arrays["A"], a) and np.array_equal(arrays["B"], b)
    assert "define void @swauto_gemm(" in program.llvm_ir
    assert "noalias" in program.llvm_ir
    assert "align 64" in program.llvm_ir
    assert "_double" not in program.llvm_ir
    assert "fadd contract" in program.llvm_ir


# --- hand-built modules ---------------------------------------------------------------------------


def _box(name: str, starts, extents, dims) -> Access:
    return Access(name, tuple(Const(s) if isinstance(s, int) else s for s in starts), tuple(extents),
                  tuple(dims))


def transposed_gemm_module(m: int, n: int, k: int, tile_k: int, vectorize: str | None = "M") -> Module:
    """C[M, N] += AT[K, M]^T B[K, N], with A's tile held as [K, M] and a loop over K tiles."""
    kk = Var("k_outer")
    k0 = BinOp("*", kk, Const(tile_k))
    body = Seq((
        Alloc("A_tile"), Alloc("B_tile"), Alloc("C_tile"),
        Dma("get", _box("C", (0, 0), (m, n), "MN"), _box("C_tile", (0, 0), (m, n), "MN"), "c"),
        DmaWait("c"),
        For("k_outer", Const(0), Const(k // tile_k), 1, Seq((
            Dma("get", _box("AT", (k0, 0), (tile_k, m), "KM"),
                _box("A_tile", (0, 0), (tile_k, m), "KM"), "a"),
            Dma("get", _box("B", (k0, 0), (tile_k, n), "KN"),
                _box("B_tile", (0, 0), (tile_k, n), "KN"), "b"),
            DmaWait("a"), DmaWait("b"),
            Gemm(m, n, tile_k,
                 _box("A_tile", (0, 0), (tile_k, m), "KM"),
                 _box("B_tile", (0, 0), (tile_k, n), "KN"),
                 _box("C_tile", (0, 0), (m, n), "MN"),
                 vectorize=vectorize),
        ))),
        Dma("put", _box("C", (0, 0), (m, n), "MN"), _box("C_tile", (0, 0), (m, n), "MN"), "w"),
        DmaWait("w"),
    ))
    return Module(
        "transposed",
        (Tensor("AT", (k, m)), Tensor("B", (k, n)), Tensor("C", (m, n), is_output=True)),
        (LocalBuffer("A_tile", (tile_k, m)), LocalBuffer("B_tile", (tile_k, n)),
         LocalBuffer("C_tile", (m, n))),
        body,
    )


@pytest.mark.parametrize("vectorize", ["M", "N", None])
def test_a_transposed_operand_layout(vectorize):
    m, n, k = 64, 48, 96
    arrays = gemm_inputs(m, n, k, seed=1)
    arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    compile_module(transposed_gemm_module(m, n, k, tile_k=32, vectorize=vectorize)).run(arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


def test_the_cache_returns_the_same_program_for_an_equal_module():
    first = compile_module(transposed_gemm_module(64, 48, 96, tile_k=32))
    assert isinstance(first, HostProgram)
    assert compile_module(transposed_gemm_module(64, 48, 96, tile_k=32)) is first  # equal, not identical
    assert compile_module(transposed_gemm_module(64, 48, 96, tile_k=16)) is not first


def test_a_dma_box_holding_one_index_of_a_middle_axis():
    # X[0:+4, 1, 2:+5] -> T[4, 5] -> Y[1:+4, 0:+5, 3]: boxes of different ranks and fixed axes.
    get = Dma("get", _box("X", (0, 1, 2), (4, 1, 5), ("M", None, "N")), _box("T", (0, 0), (4, 5), "MN"), "r")
    put = Dma("put", _box("Y", (1, 0, 3), (4, 5, 1), ("M", "N", None)), _box("T", (0, 0), (4, 5), "MN"), "w")
    module = Module("boxes", (Tensor("X", (4, 3, 8)), Tensor("Y", (5, 6, 4), is_output=True)),
                    (LocalBuffer("T", (4, 5)),), Seq((get, DmaWait("r"), put, DmaWait("w"))))
    arrays = {"X": np.arange(96, dtype=np.float32).reshape(4, 3, 8), "Y": np.zeros((5, 6, 4), np.float32)}
    compile_module(module).run(arrays)
    expected = np.zeros((5, 6, 4), np.float32)
    expected[1:5, 0:5, 3] = arrays["X"][0:4, 1, 2:7]
    np.testing.assert_array_equal(arrays["Y"], expected)


def gather_module(index: BinOp) -> Module:
    """Y[i % 2, i] = X[0, index(i)] for i from 63 down to 0, one element per DMA through T[1];
    `index` may use the loop variable `i` and the let-bound `h = i - 32`."""
    i = Var("i")
    parity = BinOp("%", i, Const(2))
    put = {row: Dma("put", _box("Y", (row, i), (1, 1), (None, None)), _box("T", (0,), (1,), (None,)), "w")
           for row in (0, 1)}
    body = For("i", Const(63), Const(-1), -1, Seq((
        Let("h", BinOp("-", i, Const(32))),
        Let("j", index),
        Dma("get", _box("X", (0, Var("j")), (1, 1), (None, None)), _box("T", (0,), (1,), (None,)), "r"),
        If(Compare("==", parity, Const(0)), put[0], put[1]),
    )))
    return Module(
        "gather",
        (Tensor("X", (1, 64)), Tensor("Y", (2, 64), is_output=True)),
        (LocalBuffer("T", (1,)), LocalBuffer("T_double", (1,), "float64")),
        Seq((Alloc("T_double"), Alloc("T"), body)),
    )


def _op(op: str, left, right) -> BinOp:
    return BinOp(op, left, Const(right) if isinstance(right, int) else right)


def test_statements_and_floor_arithmetic():
    # Floor division and modulo of negative and positive values, by positive and negative divisors.
    h = Var("h")
    index = _op("+", _op("+", _op("%", _op("/", h, 5), 13), _op("+", _op("%", h, -7), 6)),
                _op("max", _op("min", _op("/", h, -3), 20), 0))

    def python_index(h: int) -> int:
        return (h // 5) % 13 + (h % -7 + 6) + max(min(h // -3, 20), 0)

    arrays = {"X": np.arange(64, dtype=np.float32).reshape(1, 64), "Y": np.full((2, 64), -1, np.float32)}
    compile_module(gather_module(index)).run(arrays)
    expected = np.full((2, 64), -1, np.float32)
    for i in range(64):
        expected[i % 2, i] = python_index(i - 32)
    np.testing.assert_array_equal(arrays["Y"], expected)


def test_if_without_else_and_a_let_in_a_nested_seq():
    i = Var("i")
    copy = Dma("get", _box("X", (0, Var("j")), (1, 1), (None, None)), _box("T", (0,), (1,), (None,)), "r")
    put = Dma("put", _box("Y", (0, i), (1, 1), (None, None)), _box("T", (0,), (1,), (None,)), "w")
    body = For("i", Const(0), Const(64), 2, If(Compare("<", i, Const(40)), Seq((
        Let("j", BinOp("max", BinOp("-", Const(63), i), Const(30))), copy, put,
    ))))
    module = Module("sparse", (Tensor("X", (1, 64)), Tensor("Y", (1, 64), is_output=True)),
                    (LocalBuffer("T", (1,)),), body)
    arrays = {"X": np.arange(64, dtype=np.float32).reshape(1, 64), "Y": np.zeros((1, 64), np.float32)}
    compile_module(module).run(arrays)
    expected = np.zeros(64, np.float32)
    expected[0:40:2] = [max(63 - i, 30) for i in range(0, 40, 2)]
    np.testing.assert_array_equal(arrays["Y"][0], expected)


# --- errors ---------------------------------------------------------------------------------------


def test_unbound_variables_are_codegen_errors():
    module = gather_module(BinOp("+", Var("nowhere"), Const(1)))
    with pytest.raises(CodegenError, match="nowhere"):
        generate(module)


def test_a_gemm_operand_missing_a_dimension_is_a_codegen_error():
    module = transposed_gemm_module(64, 48, 96, tile_k=32)
    gemm = module.body.stmts[5].body.stmts[4]
    bad = Gemm(gemm.m, gemm.n, gemm.k, _box("A_tile", (0, 0), (32, 64), (None, "M")), gemm.b, gemm.c, "M")
    broken = Module(module.name, module.tensors, module.buffers, For("x", Const(0), Const(1), 1, bad))
    with pytest.raises(CodegenError, match="must carry M and K"):
        compile_module(broken)


def test_unsupported_dtypes_are_codegen_errors():
    module = Module("f64", (Tensor("X", (4,), "float64"),), (), Seq(()))
    with pytest.raises(CodegenError, match="float32"):
        compile_module(module)
