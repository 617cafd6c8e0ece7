"""Skipping GEMMs on tiles of zero padding (`swauto.passes.guard_padding`): the guards say exactly
where a factor's box lies outside its tensor, the host computes the reference's result with them on
sampled candidates, the host model counts the calls that run, and the SW26010 keeps every call."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import numpy as np
import pytest
from test_conv import CONV_SW, params_of, problem

import swauto
from conftest import assert_golden_stages, relative_error, sample_legal
from swauto.api import load
from swauto.errors import Rejected
from swauto.ir import expr as ex
from swauto.ir.analysis import executions
from swauto.ir.nodes import Call, Compare, For, Seq
from swauto.ir.visitor import Rewriter, walk
from swauto.machine import SUNWAY, HostScratchpad, local_memory_machine
from swauto.pipeline import lower
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import candidates
from swauto.tuner import host_model
from swauto.tuner.space import explore

# (B, Ni, No, Ri, Ci, k, stride, pad): 3 x 3 on 5 x 6, 5 x 5 padded 2, stride 2, and few channels
# (kernel taps join K: the input box is a window).
SHAPES = [(2, 8, 8, 5, 6, 3, 1, 1), (1, 8, 8, 6, 7, 5, 1, 2), (2, 8, 8, 9, 9, 3, 2, 1), (1, 3, 8, 6, 7, 3, 1, 1)]


def _guarded(module) -> list[tuple[Call, tuple[For, ...]]]:
    return [(node, loops) for node, loops in walk(module.body) if isinstance(node, Call) and node.runs_if]


def _iterations(loops: tuple[For, ...], env: dict[str, int] | None = None):
    """Every iteration of `loops` (outermost first) as the values of their variables."""
    env = env or {}
    if not loops:
        yield env
        return
    first, *rest = loops
    for value in range(ex.evaluate(first.start, env), ex.evaluate(first.stop, env), first.stride):
        yield from _iterations(tuple(rest), {**env, first.var: value})


def _box_meets_tensor(access, shape, env) -> bool:
    box = access.bounding_box()
    return all(ex.evaluate(start, env) + span - 1 >= 0 and ex.evaluate(start, env) <= size - 1
               for start, span, size in zip(box.starts, box.spans(), shape, strict=True))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_call_runs_exactly_where_every_factor_meets_its_tensor(shape):
    """On 40 candidates of the space, at every iteration of the loops around each GEMM that adds into
    its output (in the stage where its operands are still boxes of tensors), its guards hold iff each
    factor's box meets its tensor: a call without guards never reads padding alone."""
    op = load(CONV_SW, params_of(shape))
    shapes = {t.name: t.shape for t in op.seed.tensors}
    checked = 0
    pool = list(candidates(op, (False,)))
    for candidate in random.Random(sum(shape)).sample(pool, min(40, len(pool))):
        try:
            stages = lower(op, candidate, HostScratchpad())
        except Rejected:
            continue
        module = dict(stages).get("guard_padding", dict(stages)["pad_primitive"])
        adding = [(node, loops) for node, loops in walk(module.body)
                  if isinstance(node, Call) and node.signature.kind == "gemm" and not node.overwrite]
        for call, loops in adding:
            for env in _iterations(loops):
                meets = all(_box_meets_tensor(access, shapes[access.name], env)
                            for role, access in call.operands if role != call.output_role)
                assert all(c.holds(env) for c in call.runs_if) == meets, (call, env)
                checked += not meets
    assert checked  # some iterations do skip


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_host_candidate_with_guards_computes_the_reference(shape):
    """Eight candidates of the space (with guards wherever the input is padded) on the host, drawn one by
    one (the space is not built whole), the host's micro-kernels in turn."""
    op, arrays, expected = problem(shape, seed=3)
    host = local_memory_machine("host")
    for index, candidate in enumerate(sample_legal(op, 8, sum(shape), (host,))):
        candidate = replace(candidate, micro_kernel=host.micro_kernels[index % len(host.micro_kernels)])
        kernel = swauto.compile(CONV_SW, params_of(shape), target="host", schedule=candidate, threads=1)
        output = arrays["output"].copy()
        kernel(input=arrays["input"], weight=arrays["weight"], output=output)
        assert relative_error(output, expected) <= 1e-5, candidate


def test_executions_count_the_iterations_where_every_condition_holds():
    i, j, k = (ex.Var(name) for name in "ijk")
    body = Seq(())
    loops = (For("i", ex.Const(0), ex.Const(7), 1, body), For("j", ex.Const(0), ex.Const(3), 1, body),
             For("k", ex.Const(0), ex.Const(5), 2, body))
    conditions = (Compare(">=", i + j - 1, ex.Const(0)), Compare("<=", i + j - 1, ex.Const(6)),
                  Compare("<", k, ex.Const(3)))
    brute = sum(all(c.holds({"i": a, "j": b, "k": c_}) for c in conditions)
                for a in range(7) for b in range(3) for c_ in range(0, 5, 2))
    assert executions(loops, conditions) == brute == 19 * 2
    assert executions(loops, ()) == 7 * 3 * 3


def test_the_host_model_prices_only_the_calls_that_run():
    """A 3 x 3 kernel on a 7 x 7 image, one output pixel per GEMM: 361 of its 441 taps read the image
    (19 of 21 per axis); the model counts those flops and prices less time than with every call."""
    params = {"B": 8, "Ni": 64, "No": 64, "Ri": 7, "Ci": 7, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(CONV_SW, params)
    candidate = _candidate(op, {"cCo": 1, "cRo": 1}, ("N_outer", "K_outer", "cKr", "cRo_outer", "cCo_outer", "cKc"))
    final = lower(op, candidate, HostScratchpad())[-1][1]
    assert _guarded(final)
    unguarded = replace(final, body=_strip(final.body))
    machine = host_model.machine()
    guarded, plain = host_model.estimate(final, 1, machine), host_model.estimate(unguarded, 1, machine)
    assert guarded.flops * 441 == plain.flops * 361
    assert guarded.seconds < plain.seconds


def _candidate(op, splits: dict[str, int], order: tuple[str, ...]) -> Candidate:
    """The space's first candidate with those split factors and that loop order."""
    return next(c for c in candidates(op, (False,)) if dict(c.splits).items() >= splits.items() and c.order == order)


class _Unguard(Rewriter):
    def rewrite_Call(self, call: Call) -> Call:
        return replace(call, runs_if=())


def _strip(stmt):
    return _Unguard().rewrite(stmt)


def test_the_sw26010_keeps_every_call():
    """The thesis' model prices every tap on the SW26010, and so does its simulator: no guards there."""
    op = load(CONV_SW, params_of(SHAPES[0]))
    lowered = 0
    for candidate in itertools.islice(candidates(op, (False, True)), 40):
        try:
            stages = lower(op, candidate, SUNWAY)
        except Rejected:
            continue
        assert "guard_padding" not in dict(stages)
        assert not _guarded(stages[-1][1])
        lowered += 1
    assert lowered


def test_golden_ir_with_guards_on_the_host():
    params = {"B": 2, "Ni": 48, "No": 8, "Ri": 5, "Ci": 6, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(CONV_SW, params)
    candidate = _candidate(op, {"cCo": 2, "cRo": 1}, ("N_outer", "K_outer", "cRo_outer", "cCo_outer", "cKr", "cKc"))
    assert_golden_stages(op, candidate, "conv2d_guarded_host.txt", HostScratchpad())


def test_guarded_and_unguarded_kernels_agree_exactly():
    """Skipping adds nothing that was not zero: the same bits as running every call."""
    from swauto.backends.host import compile_module

    shape = (2, 8, 8, 5, 6, 3, 1, 1)
    op, arrays, _ = problem(shape, seed=5)
    final = next(stages[-1][1] for _, stages in explore(op, HostScratchpad()).legal if _guarded(stages[-1][1]))
    results = []
    for module in (final, replace(final, body=_strip(final.body))):
        ready = {t.name: np.array(arrays[t.name].transpose(t.layout) if t.layout else arrays[t.name], copy=True)
                 for t in module.tensors}
        compile_module(module).run(ready, threads=1)
        results.append(ready["output"])
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize("change", ["overwrite", "unknown variable"])
def test_the_verifier_refuses_a_guard_that_could_change_the_result(change):
    """A guarded call must add into an output defined before it, and be guarded by loop variables."""
    from swauto.ir import verify

    params = {"B": 2, "Ni": 48, "No": 8, "Ri": 5, "Ci": 6, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(CONV_SW, params)
    final = lower(op, _candidate(op, {"cCo": 2, "cRo": 1}, ("N_outer", "K_outer", "cRo_outer", "cCo_outer", "cKr",
                                                           "cKc")), HostScratchpad())[-1][1]
    verify.verify(final)

    class Break(Rewriter):
        def rewrite_Call(self, call: Call) -> Call:
            if not call.runs_if:
                return call
            if change == "overwrite":
                return replace(call, overwrite=True)
            return replace(call, runs_if=(*call.runs_if, Compare(">=", ex.Var("nowhere"), ex.Const(0))))

    with pytest.raises(verify.VerificationError, match="guarded"):
        verify.verify(replace(final, body=Break().rewrite(final.body)))
