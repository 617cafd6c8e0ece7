"""forward_transfers: values kept in local memory between statements, and writes no one reads dropped.

Each operator here is run with every candidate on both targets against the reference (the hazards a
forwarding must respect: a holder made stale by a later write, a value carried from one sequence-loop
iteration to the next), and its final IR is checked for the transfers forwarding removes or keeps.
"""

from __future__ import annotations

import numpy as np
import pytest

import swauto
from conftest import STEPS_SW, relative_error
from swauto.ir.nodes import Call, Dma, Module
from swauto.ir.visitor import walk
from swauto.reference import reference

CHAIN = """
operator chain(M = 6, N = 10) {
  tensor x[M, N]
  tensor y[M, N] local
  tensor z[M, N]
  compute {
    first: relu(M = M, N = N, X = x, Z = y)
    second: exp(M = M, N = N, X = y, Z = z)
  }
}
"""

REWRITTEN = """
operator rewritten(N = 8) {
  tensor x[N]
  tensor w[N]
  tensor y[N]
  tensor z[N]
  compute {
    a: relu(N = N, X = x, Z = y)
    b: exp(N = N, X = w, Z = y)
    c: scale(N = N, X = y, Z = z, by = 2.0)
  }
}
"""

RECURRENCE = """
operator recurrence(T = 5, N = 8) {
  tensor x[T, N]
  tensor y[T + 1, N]
  compute {
    start: copy(N = N, X = x[0], Z = y[0])
    for t in 0..T {
      add(N = N, X = y[t], Y = x[t], Z = y[t + 1])
      scale(N = N, X = y[t + 1], Z = y[t + 1], by = 0.5)
    }
  }
}
"""

WEIGHTED = """
operator weighted(T = 4, N = 8) {
  tensor x[T, N]
  tensor w[N]
  tensor y[T, N]
  compute {
    for t in 0..T {
      scaled: mul(N = N, X = x[t], Y = w, Z = y[t])
      shifted: add(N = N, X = y[t], Y = w, Z = y[t])
    }
  }
}
"""

PRODUCT = """
operator product(M = 16, N = 16, K = 8) {
  tensor a[M, K]
  tensor b[K, N]
  tensor y[M, N] local
  tensor z[M, N]
  compute {
    gemm(M = M, N = N, K = K, A = a, B = b, C = y)
    relu(M = M, N = N, X = y, Z = z)
  }
}
"""


SHARED = """
operator shared(M = 16, N = 16, K = 8) {
  tensor a[M, K]
  tensor b1[K, N]
  tensor b2[K, N]
  tensor y1[M, N]
  tensor y2[M, N]
  compute {
    first: gemm(M = M, N = N, K = K, A = a, B = b1, C = y1)
    second: gemm(M = M, N = N, K = K, A = a, B = b2, C = y2)
  }
}
"""

PRODUCT_BIAS = PRODUCT.replace("tensor y[M, N] local", "tensor y[M, N] local\n  tensor bias[N]").replace(
    "relu(M = M, N = N, X = y, Z = z)", "add(M = M, N = N, X = y, Y = bias, Z = z)")


def _calls(module: Module) -> list[Call]:
    return [node for node, _ in walk(module.body) if isinstance(node, Call)]


def _transfers(module: Module, tensor: str, direction: str, in_loops: bool = False) -> list[Dma]:
    """The transfers of `tensor` in that direction (with `in_loops`, those inside a loop)."""
    return [node for node, loops in walk(module.body) if isinstance(node, Dma) and node.tensor.name == tensor
            and node.direction == direction and (loops or not in_loops)]


def _check_every_candidate(text: str, target: str) -> list[Module]:
    """Run every candidate against the reference; their final IRs."""
    finals = []
    for candidate in swauto.schedules(text, target=target):
        kernel = swauto.compile(text, target=target, schedule=candidate)
        rng = np.random.default_rng(1)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32)
                  for t in kernel.operator.seed.tensors if not t.is_local}
        expected = reference(kernel.operator, arrays)
        kernel(**arrays)
        for name, value in expected.items():
            assert relative_error(arrays[name], value) < 1e-5, (candidate.id, name)
        finals.append(kernel.module)
    assert finals
    return finals


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_an_intermediate_passed_between_statements_stays_in_local_memory(target):
    for final in _check_every_candidate(CHAIN, target):
        # The first statement's result is read from where it computed it and never written to memory.
        assert not _transfers(final, "y", "get") and not _transfers(final, "y", "put")
        assert any(buffer.resident for buffer in final.buffers)


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_a_later_write_makes_a_held_value_stale(target):
    for final in _check_every_candidate(REWRITTEN, target):
        # c reads b's result (checked against the reference); a's write of y, overwritten by b's
        # before anything reads it, is gone.
        assert len(_transfers(final, "y", "put")) == 1 and not _transfers(final, "y", "get")


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_a_value_carried_to_the_next_iteration_stays_in_local_memory(target):
    for final in _check_every_candidate(STEPS_SW, target):
        # Inside an iteration, scale reads add's result in local memory and add's write is dead; the
        # next iteration's add reads scale's buffer: s is read once before the loop, written once after.
        assert not _transfers(final, "s", "get", in_loops=True) and not _transfers(final, "s", "put", in_loops=True)
        assert len(_transfers(final, "s", "get")) == 1 and len(_transfers(final, "s", "put")) == 2


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_a_row_the_previous_iteration_wrote_is_read_from_local_memory(target):
    for final in _check_every_candidate(RECURRENCE, target):
        # Iteration t reads y[t], which iteration t - 1 wrote from a buffer it still holds; every row is
        # still written (y is an output), once.
        assert not _transfers(final, "y", "get", in_loops=True)
        assert len(_transfers(final, "y", "put", in_loops=True)) == 1


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_a_weight_the_loop_never_writes_is_read_once_before_it(target):
    for final in _check_every_candidate(WEIGHTED, target):
        assert not _transfers(final, "w", "get", in_loops=True) and _transfers(final, "w", "get")


def test_a_map_takes_the_gemm_layout_to_read_its_result_in_local_memory():
    # The GEMM holds its result in the mesh's blocks of its padded tile; the map, laid out the same,
    # finds each element on the CPE that computed it.
    for final in _check_every_candidate(PRODUCT, "sw26010"):
        assert not _transfers(final, "y", "get") and not _transfers(final, "y", "put")
        gemm_c, relu_z = (final.buffer(call.output.name) for call in _calls(final))
        assert (relu_z.shape, relu_z.spread) == (gemm_c.shape, "mesh")


def test_a_map_with_a_broadcast_operand_keeps_its_shares_and_reads_again():
    # Bias rows are a [1, N] box: no single layout puts element (i, j) of every operand on one CPE.
    for final in _check_every_candidate(PRODUCT_BIAS, "sw26010"):
        assert _transfers(final, "y", "get")
        assert final.buffer(_calls(final)[1].output.name).spread == "flat"


@pytest.mark.parametrize("target", ["sw26010", "host"])
def test_a_zero_padded_operand_is_read_once_for_two_gemms(target):
    # 16 rows are padded to the primitive's 128 with zeros: the second GEMM reads the first one's
    # buffer, zeros included, since nothing computes into it.
    for final in _check_every_candidate(SHARED, target):
        if target == "sw26010":
            assert len(_transfers(final, "a", "get")) == 1
