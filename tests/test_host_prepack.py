"""Constant tiles prepacked on the host (`backends/host/prepack`): the tiles a kernel would copy from a
constant tensor at every call are arranged once, when `Kernel.prepare` binds it, and each call points its
buffers at them. On sampled candidates of several operators, odd sizes, strides and zero padding included,
on one and two threads, prepared or called whole, the kernel computes the reference's result."""

from __future__ import annotations

import numpy as np
import pytest

import swauto
from conftest import EXAMPLES, relative_error, sample_legal
from swauto import targets
from swauto.api import load
from swauto.ir.expr import Const, Var
from swauto.ir.nodes import Access, Compare, Dma, For, If, LocalBuffer, Module, Seq, Tensor, Zero
from swauto.reference import reference

# (example, sizes, constants, candidates sampled; 0: the model's picks, as the body of a split has a space of its own)
CASES = [
    ("conv2d", {"B": 3, "Ni": 5, "No": 7, "Ri": 9, "Ci": 8, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1}, ["weight"], 6),
    ("conv2d", {"B": 1, "Ni": 19, "No": 33, "Ri": 6, "Ci": 5, "Kr": 1, "Kc": 1, "stride": 1, "pad": 0}, ["weight"], 6),
    ("fc_bias_relu", {"B": 5, "In": 37, "Out": 30}, ["weight", "bias"], 6),
    ("conv2d_winograd4", {"B": 3, "Ni": 5, "No": 6, "Ri": 7, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
     ["weight"], 0),
]


def _arrays(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


@pytest.mark.parametrize(("name", "params", "constants", "count"), CASES,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(CASES)])
def test_every_sampled_candidate_with_prepacked_constants_computes_the_reference(name, params, constants, count):
    source = EXAMPLES / f"{name}.sw"
    op = load(source, params)
    out = next(t.name for t in op.seed.tensors if t.is_output)
    packed = 0
    host = targets.get("host").machine()
    sampled = sample_legal(op, count, seed=len(params), machines=(host,)) if count else [None] * 2
    for index, candidate in enumerate(sampled):
        threads = 1 + index % 2
        kernel = swauto.compile(source, params, target="host", schedule=candidate, constants=constants, threads=threads)
        packed += bool(kernel.program.plan.prepacked)
        arrays = _arrays(kernel.shapes, index)
        expected = reference(op, {key: value.copy() for key, value in arrays.items()})[out]

        whole = {key: value.copy() for key, value in arrays.items()}
        kernel(**whole)  # the tiles arranged within the call
        assert relative_error(whole[out], expected) < 1e-4, candidate and candidate.describe()

        prepared = kernel.prepare(**{c: arrays[c] for c in constants})
        for c in constants:
            arrays[c] += 1.0  # arranged at prepare: later changes do not reach the kernel
        for _ in range(2):  # the arranged tiles are read again, not consumed
            rest = {key: value.copy() for key, value in arrays.items() if key not in constants}
            prepared(**rest)
            assert relative_error(rest[out], expected) < 1e-4, candidate and candidate.describe()

        # Called whole again with the changed constants: the call arranges them anew.
        changed = reference(op, {key: value.copy() for key, value in arrays.items()})[out]
        whole = {key: value.copy() for key, value in arrays.items()}
        kernel(**whole)
        assert relative_error(whole[out], changed) < 1e-4, candidate and candidate.describe()
    assert packed, "no sampled candidate had a prepacked constant tile: the test checks nothing new"


def test_the_tiles_of_a_constant_are_prepacked_and_priced_as_read_in_place():
    """The same candidate with the weight constant or not: only the constant's buffers are prepacked, the
    other tiles are copied as before, and the model prices the prepacked call no higher than the copying one
    (a prepacked tile streams in no slower than its copy would read it, whatever the calibration measured:
    one whose panel rate came out below its copy rate priced it higher) and counts fewer bytes copied."""
    from swauto.tuner import host_model

    params = {"B": 1, "Ni": 64, "No": 96, "Ri": 7, "Ci": 7, "Kr": 1, "Kc": 1, "stride": 1, "pad": 0}
    source = EXAMPLES / "conv2d.sw"
    constant = swauto.compile(source, params, target="host", constants=["weight"])
    plain = swauto.compile(source, params, target="host", schedule=constant.schedule)
    assert not plain.program.plan.prepacked
    prepacked = constant.program.plan.prepacked
    assert prepacked and {p.tensor for p in prepacked.values()} == {"weight"}
    assert all(p.buffer.startswith("weight") for p in prepacked.values())
    assert any(line.strip().startswith("tensor weight") and "# constant" in line for line in constant.ir.splitlines())
    machine = host_model.machine()
    estimates = [host_model.estimate(kernel.module, 1, machine) for kernel in (constant, plain)]
    assert estimates[0].seconds <= estimates[1].seconds
    assert estimates[0].copy_bytes < estimates[1].copy_bytes


def _module(body, constant: bool = True) -> Module:
    tensor = Tensor("w", (8, 16), is_constant=constant)
    return Module("m", (tensor, Tensor("y", (8, 16), is_output=True)), (LocalBuffer("t", (4, 16)),), body)


def _get(start) -> Dma:
    return Dma("get", Access("w", (start, Const(0)), (4, 16), (None, None)), Access("t", (Const(0), Const(0)),
                                                                                     (4, 16), (None, None)), "r")


@pytest.mark.parametrize(("body", "constant", "expected"), [
    (For("i", Const(0), Const(2), 1, _get(Var("i") * 4)), True, ((("i", 0, 1, 2),), True)),
    (For("i", Const(0), Const(2), 1, _get(Var("i") * 4)), False, None),  # not constant
    (For("i", Const(0), Const(2), 1, If(Compare("<", Var("i"), Const(1)), _get(Var("i") * 4))), True, None),  # guarded
    (For("i", Const(0), Const(2), 1, Seq((_get(Var("i") * 4), Zero(Access("t", (Const(0), Const(0)), (4, 16),
                                                                          (None, None)))))), True, None),  # zeroed
    (Seq((For("i", Const(0), Const(2), 1, _get(Var("i") * 4)), _get(Const(4)))), True, ((("i", 0, 1, 2),), False)),
])
def test_which_buffers_are_prepacked(body, constant, expected):
    """Prepacked: every get of a whole buffer from a constant, under loops of constant bounds, no condition,
    nothing else writing it; each get its section of tiles, numbered by its key loops."""
    from swauto.backends.host.layout import row_major
    from swauto.backends.host.prepack import prepacked

    found = prepacked(_module(body, constant), {}, {"t": row_major((4, 16))})
    assert found.keys() == prepacked(_module(body, constant), {}).keys()  # the model's question, without layouts
    if expected is None:
        assert found == {}
        return
    keys, single = expected
    (packed,) = found.values()
    first = packed.sections[0]
    assert [(k.var, k.start, k.stride, k.trips) for k in first.loops] == list(keys)
    assert packed.tile == 64 and (len(packed.sections) == 1) == single
    assert packed.size == sum(s.tiles for s in packed.sections) * packed.tile
