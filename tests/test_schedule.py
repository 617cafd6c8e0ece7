"""The schedule space of the GEMM example: its size, its rejections, the host's micro-kernel choices,
stable ids, JSON round trips, and the printed IR of one candidate after each pass (golden file)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import swauto
from conftest import EXAMPLES, assert_golden_stages
from swauto.api import load
from swauto.errors import Rejected, ScheduleError
from swauto.ir.nests import loop_nest
from swauto.ir.nodes import Dma, For
from swauto.ir.visitor import walk
from swauto.machine import SUNWAY, HostScratchpad, local_memory_machine
from swauto.pipeline import lower
from swauto.schedule import transforms
from swauto.schedule.candidate import Candidate
from swauto.schedule.space import candidates
from swauto.tuner.space import count, explore

GOLDEN = Path(__file__).parent / "golden"


def test_space_is_the_product_of_the_choices(gemm_source, monkeypatch):
    monkeypatch.setenv("SWAUTO_VERIFY", "0")  # the space's size under test, not its IR (the other tests verify)
    # 640: every tile size leaves loops of several iterations, so every loop takes part in the orders.
    space = explore(load(gemm_source, {"M": 640, "N": 640, "K": 640}), SUNWAY)
    # M, N, K tile sets x loop orders x vectorized dimension x double buffering or not
    assert space.total == 3 * 3 * 4 * 6 * 2 * 2
    assert len(space.legal) + sum(space.rejected.values()) == space.total
    assert set(space.rejected) == {"local memory overflow"}
    doubled = [c for c in space.candidates if c.double_buffer]
    single = [c for c in space.candidates if not c.double_buffer]
    assert len(doubled) < len(single)  # double buffering overflows more often: it needs twice the tiles


def test_a_tile_larger_than_its_dimension_is_the_whole_dimension(gemm_source):
    """gemm.sw splits M, N by {128, 256, 512} and K by {32, 64, 128, 256}. At M = 256 that is tiles of
    128 and 256 (512 is the whole 256 too), at N = 384 of 128, 256 and 384, at K = 128 of 32, 64 and
    128. A tile as large as its dimension leaves a loop of one iteration, which takes no part in the
    orders (it sits outermost): per choice of tiles, the factorial of the loops that run more than once."""
    space = explore(load(gemm_source, {"M": 256, "N": 384, "K": 128}), SUNWAY)
    orders = sum(math.factorial(sum(1 for size, tile in ((256, m), (384, n), (128, k)) if tile < size))
                 for m in (128, 256) for n in (128, 256, 384) for k in (32, 64, 128))
    assert space.total == orders * 2 * 2
    assert {dict(c.splits)["M"] for c in candidates(space.operator)} == {128, 256}
    assert {dict(c.splits)["N"] for c in candidates(space.operator)} == {128, 256, 384}
    for candidate in space.candidates:
        tiles = dict(candidate.splits)
        whole = [f"{dim}_outer" for dim, size in (("M", 256), ("N", 384), ("K", 128)) if tiles[dim] >= size]
        assert candidate.order[: len(whole)] == tuple(name for name in ("M_outer", "N_outer", "K_outer")
                                                       if name in whole)


def test_pinned_loops_keep_their_place_and_the_others_take_every_order(gemm_source):
    """`reorder any with gemm.K.outer innermost, gemm.N.outer outermost`: of the three tile loops only
    M_outer is free, so one order per choice of tiles; loops that run once still come first."""
    text = gemm_source.read_text().replace("reorder any", "reorder any with gemm.K.outer innermost, "
                                                          "gemm.N.outer outermost")
    op = load(text, {"M": 640, "N": 640, "K": 640})
    points = list(candidates(op))
    assert {c.order for c in points} == {("N_outer", "M_outer", "K_outer")}
    assert len(points) == count(op, SUNWAY)[0] == 3 * 3 * 4 * 2 * 2
    op = load(text, {"M": 640, "N": 128, "K": 640})  # N's tile is all of N: its loop runs once
    assert {c.order for c in candidates(op)} == {("N_outer", "M_outer", "K_outer")}
    op = load(text.replace("gemm.N.outer outermost", "gemm.M.outer outermost"), {"M": 128, "N": 640, "K": 640})
    assert {c.order for c in candidates(op)} == {("M_outer", "N_outer", "K_outer")}


def test_primitive_constraints_reject_small_vectorized_tiles():
    text = (Path(__file__).parent.parent / "examples" / "gemm.sw").read_text()
    text = text.replace("{128, 256, 512}", "{32, 64, 128}", 1)  # the M tile set
    space = explore(load(text, {"M": 128, "N": 128, "K": 64}), SUNWAY)
    reasons = space.rejected
    assert reasons["primitive constraint"] > 0
    for candidate in space.candidates:
        m_tile = dict(candidate.splits)["M"]
        assert m_tile % (128 if candidate.vectorize == "M" else 32) == 0


# The points of the space, legal or not: a candidate's JSON and id do not depend on its lowering (building
# the legal ones lowered the whole space at collection, in every test process).
@given(st.sampled_from(list(candidates(load(Path(__file__).parent.parent / "examples" / "gemm.sw"), (False, True)))))
@settings(max_examples=30, deadline=None)
def test_candidate_json_round_trip_keeps_id(candidate):
    again = Candidate.from_json(candidate.to_json())
    assert again == candidate and again.id == candidate.id


def test_the_host_space_has_micro_kernels_sharing_each_lowering_and_no_double_buffering(gemm_source):
    op = load(gemm_source, {"M": 256, "N": 256, "K": 128})
    tiles = (6, 4), (4, 4)
    host = explore(op, HostScratchpad(micro_kernels=tiles))
    plain = explore(op, HostScratchpad())
    assert host.total == 2 * plain.total and len(host.legal) == 2 * len(plain.legal)
    by_lowering: dict[int, set] = {}
    for candidate, stages in host.legal:
        by_lowering.setdefault(id(stages), set()).add(candidate.micro_kernel)
    assert all(kernels == set(tiles) for kernels in by_lowering.values())
    assert {replace(c, micro_kernel=None) for c in host.candidates} == set(plain.candidates)
    # The host's copies are synchronous: its space leaves double buffering out.
    assert not any(c.double_buffer for c in host.candidates)
    # Its micro-kernel takes the vectorized dimension from C's layout: the space's first stands for all.
    assert {c.vectorize for c in host.candidates} == {op.space.vectorize[0]}
    assert {replace(c, double_buffer=False) for c in explore(op, SUNWAY).candidates
            if c.vectorize == op.space.vectorize[0]} <= set(plain.candidates)
    # A candidate keeps its micro-kernel through JSON; without one its id is what it always was.
    candidate = host.candidates[1]
    assert Candidate.from_json(candidate.to_json()) == candidate and "micro_kernel" in candidate.to_json()
    assert "micro_kernel" not in replace(candidate, micro_kernel=None).to_json()
    assert "micro-kernel 4 rows x 4 vectors" in candidate.describe()


def test_an_operator_without_a_gemm_has_one_candidate_per_program():
    """A register tile shapes only a GEMM's code: a depthwise convolution (maps alone) is not built
    again in each of the host's micro-kernels, and `count` says so before building it."""
    op = load((EXAMPLES / "conv2d_depthwise.sw").read_text(),
              {"B": 1, "C": 32, "Ri": 10, "Ci": 10, "stride": 1})
    host = HostScratchpad(micro_kernels=((6, 4), (4, 4)))
    space = explore(op, host)
    assert space.total == count(op, host)[0] == explore(op, HostScratchpad()).total
    assert {c.micro_kernel for c in space.candidates} == {None}
    assert not any("micro-kernel" in factor for factor in count(op, host)[1])


def test_a_micro_kernel_the_target_lacks_is_refused(gemm_source):
    op = load(gemm_source, {"M": 256, "N": 256, "K": 128})
    candidate = replace(explore(op, HostScratchpad()).candidates[0], micro_kernel=(9, 9))
    with pytest.raises(Rejected, match="micro-kernel of 9 rows x 9 vectors"):
        lower(op, candidate, HostScratchpad(micro_kernels=((6, 4),)))
    with pytest.raises(ScheduleError, match="micro-kernel of 9 rows x 9 vectors"):
        swauto.compile(gemm_source, {"M": 256, "N": 256, "K": 128}, target="sw26010", schedule=candidate)


def test_ids_are_stable_across_shapes(gemm_source, monkeypatch):
    monkeypatch.setenv("SWAUTO_VERIFY", "0")  # the ids under test, not the IR
    small = {c.id for c in swauto.schedules(gemm_source, {"M": 256, "N": 256, "K": 128})}
    large = {c.id for c in swauto.schedules(gemm_source, {"M": 1024, "N": 1024, "K": 1024})}
    assert small < large


def test_dma_sits_in_the_innermost_loop_its_address_uses(gemm_source):
    """Algorithm 7: each get is the first child of the innermost loop whose iterator it uses."""
    op = load(gemm_source, {"M": 512, "N": 512, "K": 512})
    candidate = Candidate((("M", 128), ("N", 128), ("K", 64)), ("K_outer", "M_outer", "N_outer"), "N")
    final = dict(lower(op, candidate, SUNWAY))["infer_dma"]
    homes = {}
    for node, loops in walk(final.body):
        if isinstance(node, Dma) and node.direction == "get":
            homes[node.tensor.name] = loops[-1].var if loops else None
    assert homes == {"A": "M_outer", "B": "N_outer", "C": "N_outer"}
    n_loop = next(node for node, _ in walk(final.body) if isinstance(node, For) and node.var == "N_outer")
    first = n_loop.body.stmts[0]
    assert isinstance(first, Dma) and first.tensor.name == "B"


def test_unknown_schedule_id_is_a_clear_error(gemm_source):
    with pytest.raises(ScheduleError, match="no legal candidate has id deadbeef"):
        swauto.compile(gemm_source, target="sw26010", schedule="deadbeef")


def test_illegal_candidate_is_refused_with_its_reason(gemm_source):
    candidate = Candidate((("M", 512), ("N", 512), ("K", 256)), ("M_outer", "N_outer", "K_outer"), "N")
    with pytest.raises(ScheduleError, match="local memory overflow"):
        swauto.compile(gemm_source, target="sw26010", schedule=candidate)


def test_a_dimension_smaller_than_every_tile_size_is_one_tile(gemm_source):
    """gemm.sw splits M by {128, 256, 512}; at M = 64 the whole of M is the one tile, and the result
    is right."""
    params = {"M": 64, "N": 160, "K": 96}
    assert {dict(c.splits)["M"] for c in candidates(load(gemm_source, params))} == {64}
    chosen = Candidate((("M", 64), ("N", 128), ("K", 32)), ("M_outer", "N_outer", "K_outer"), "N")
    for target in ("sw26010", "host"):
        kernel = swauto.compile(gemm_source, params, target=target, schedule=chosen)
        rng = np.random.default_rng(1)
        a, b = rng.random((64, 96), dtype=np.float32), rng.random((96, 160), dtype=np.float32)
        c = np.zeros((64, 160), np.float32)
        kernel(A=a, B=b, C=c)
        assert np.allclose(c, a.astype(np.float64) @ b, rtol=1e-5), target


def test_golden_ir_after_each_pass(gemm_source):
    op = load(gemm_source, {"M": 256, "N": 384, "K": 128})
    candidate = Candidate((("M", 128), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N")
    assert_golden_stages(op, candidate, "gemm_256x384x128.txt")


def test_ir_compares_structurally_and_hashes_stably(gemm_source):
    import subprocess
    import sys

    from swauto.ir.nodes import fingerprint

    op = load(gemm_source, {"M": 256, "N": 384, "K": 128})
    candidate = Candidate((("M", 128), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N")
    first, second = lower(op, candidate, SUNWAY)[-1][1], lower(op, candidate, SUNWAY)[-1][1]
    assert first == second and first is not second and hash(first) == hash(second)
    other = lower(op, Candidate(candidate.splits, candidate.order, "M"), SUNWAY)[-1][1]
    assert other != first and fingerprint(other) != fingerprint(first)
    script = (
        "from swauto.api import load; from swauto.pipeline import lower; from swauto.machine import SUNWAY;"
        "from swauto.schedule.candidate import Candidate; from swauto.ir.nodes import fingerprint;"
        f"op = load({str(gemm_source)!r}, {{'M': 256, 'N': 384, 'K': 128}});"
        f"print(fingerprint(lower(op, Candidate.from_json({candidate.to_json()!r}), SUNWAY)[-1][1]))"
    )
    other_process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert other_process.stdout.strip() == fingerprint(first)


# --- the space's bound, lazy enumeration, strict candidate JSON (issue 14) --------------------------

def _nest(loops: int) -> str:
    """A seed of `loops` nested loops under `reorder any`: loops! orders."""
    body = "gemm(M = M, N = N, K = K, A = A, B = B, C += C)"
    for level in range(loops):
        body = f"for l{level} in 0..2 {{ {body} }}"
    return (f"operator g(M = 128, N = 128, K = 64) {{ tensor A[M, K] tensor B[K, N] tensor C[M, N] "
            f"compute {{ {body} }} schedule {{ reorder any }} }}")


def test_a_space_beyond_the_bound_is_refused_before_it_is_built():
    with pytest.raises(ScheduleError) as info:
        swauto.schedules(_nest(9))
    message = str(info.value)
    assert "has 1,451,520 candidates (9! = 362,880 loop orders x 2 vectorized dimensions x 2 bufferings" in message
    assert "more than the bound of 100,000" in message and "--max-candidates" in message
    with pytest.raises(ScheduleError, match="has 1,451,520 candidates"):
        swauto.compile(_nest(9), target="sw26010")


def test_the_bound_can_be_lowered_and_raised(gemm_source):
    params = {"M": 256, "N": 128, "K": 64}
    # N = 128 and K = 64 in one tile leave loops of one iteration; K in tiles of 32 does not (20 in all).
    with pytest.raises(ScheduleError, match="has 20 candidates .* more than the bound of 19"):
        swauto.schedules(gemm_source, params, max_candidates=19)
    assert swauto.schedules(gemm_source, params, max_candidates=20)
    assert explore(load(_nest(4)), SUNWAY, max_candidates=96).total == 96  # 4! orders x 2 x 2


def test_the_examples_spaces_are_far_below_the_default_bound():
    from swauto.machine import local_memory_machine
    from swauto.tuner.space import MAX_CANDIDATES, count

    for name, params in [("gemm.sw", {"M": 512, "N": 512, "K": 512}), ("conv2d.sw", {})]:
        op = load(Path(__file__).parent.parent / "examples" / name, params)
        for target in ("host", "sw26010"):
            total = count(op, local_memory_machine(target))[0]
            assert total <= 2304 and 20 * total < MAX_CANDIDATES


def test_enumeration_does_not_materialize_the_loop_orders():
    import itertools
    import tracemalloc

    from swauto.schedule.space import candidates

    op = load(_nest(11))  # 11! orders: a list of them would take gigabytes
    tracemalloc.start()
    first = list(itertools.islice(candidates(op), 10))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(first) == 10 and peak < 5 * 2**20


GOOD_JSON = {"splits": {"M": 128, "N": 128, "K": 32}, "order": ["M_outer", "N_outer", "K_outer"],
             "vectorize": "M", "layouts": {}, "double_buffer": False}


@pytest.mark.parametrize(("change", "fragment"), [
    ({"double_buffer": "false"}, "double_buffer must be true or false, got 'false'"),
    ({"double_buffer": 0}, "double_buffer must be true or false, got 0"),
    ({"splits": {"M": 128.9, "N": 128, "K": 32}}, "splits.M must be an integer, got 128.9 (float)"),
    ({"splits": {"M": 128.0, "N": 128, "K": 32}}, "splits.M must be an integer, got 128.0 (float)"),
    ({"splits": {"M": True, "N": 128, "K": 32}}, "splits.M must be an integer, got True (bool)"),
    ({"splits": {"M": "128", "N": 128, "K": 32}}, "splits.M must be an integer, got '128' (str)"),
    ({"splits": {"M": 0, "N": 128, "K": 32}}, "splits.M must be a positive integer, got 0"),
    ({"splits": [128]}, "splits must be an object of names"),
    ({"order": "M_outer"}, "order must be a list"),
    ({"order": ["M_outer", 3, "K_outer"]}, "order must hold names (strings), got 3"),
    ({"vectorize": None}, "vectorize must hold names (strings), got None"),
    ({"layouts": {"A": [1, -1]}}, "layouts.A must be a non-negative integer, got -1"),
    ({"micro_kernel": [4]}, "micro_kernel must be two positive integers [rows, vectors], got [4]"),
    ({"micro_kernel": [4, 0]}, "micro_kernel must be a positive integer, got 0"),
    ({"micro_kernel": [4, 4.5]}, "micro_kernel must be an integer, got 4.5 (float)"),
    ({"tiles": {}}, "a candidate schedule has no field 'tiles'"),
    ({"order": None, "vectorize": None}, "order must be a list"),
])
def test_candidate_json_is_validated_strictly(change, fragment):
    import json

    data = {**GOOD_JSON, **change}
    for form in (data, json.dumps(data)):
        with pytest.raises(ScheduleError) as info:
            Candidate.from_json(form)
        assert fragment in str(info.value)


@pytest.mark.parametrize("field", ["splits", "order", "vectorize"])
def test_candidate_json_needs_its_required_fields(field):
    data = {name: value for name, value in GOOD_JSON.items() if name != field}
    with pytest.raises(ScheduleError, match=f"needs the field '{field}'"):
        Candidate.from_json(data)


@pytest.mark.parametrize("text", ["[1, 2]", "not json", "[" * 100_000, "42"])
def test_candidate_json_that_is_not_an_object(text):
    with pytest.raises(ScheduleError):
        Candidate.from_json(text)


def test_the_optional_fields_keep_their_defaults():
    candidate = Candidate.from_json({name: GOOD_JSON[name] for name in ("splits", "order", "vectorize")})
    assert candidate.layouts == () and candidate.double_buffer is False and candidate.micro_kernel is None
    assert Candidate.from_json(candidate.to_json()) == candidate


def test_a_loop_order_outside_the_schedule_names_the_loops_allowed(gemm_source):
    params = {"M": 256, "N": 128, "K": 64}
    for order in (["M_outer", "N_outer", "X_outer"], ["M_outer", "N_outer"], ["M_outer", "N_outer", "K_outer",
                                                                               "K_outer"]):
        with pytest.raises(ScheduleError, match="the loops of gemm's schedule are M_outer, N_outer, K_outer, "
                                                "each exactly once"):
            swauto.compile(gemm_source, params, target="sw26010", schedule={**GOOD_JSON, "order": order})
    with pytest.raises(ScheduleError, match="splits K, M; the schedule block of gemm splits K, M, N"):
        swauto.compile(gemm_source, params, target="sw26010",
                       schedule={**GOOD_JSON, "splits": {"M": 128, "K": 32}})


def test_fusing_tile_loops_with_a_shorter_last_tile_is_rejected_with_a_reason():
    """`fuse gemm.M.outer, gemm.N.outer` where a split leaves a shorter last tile: the fused loop would
    change a tile size in its middle (no peeling makes it constant), so those candidates are refused,
    counted, and the others compile."""
    source = """
    operator gemm(M = 200, N = 200, K = 64) {
      tensor A[M, K]  tensor B[K, N]  tensor C[M, N]
      compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }
      schedule { split gemm.M by {64, 200}  split gemm.N by {64, 200}  fuse gemm.M.outer, gemm.N.outer }
    }
    """
    space = explore(load(source), local_memory_machine("host"))
    assert space.rejected["fusion not expressible"] > 0
    assert {dict(c.splits)["M"] for c in space.candidates} == {200}


@pytest.mark.parametrize("name", ["conv2d_depthwise_relu6.sw", "conv2d_relu.sw", "batchnorm.sw", "conv2d_bias_relu.sw",
                                  "fc_bias_relu.sw", "avgpool.sw"])
def test_the_space_is_counted_as_it_is_enumerated(name):
    """`count` (which sizes a space before building it, and the ranked explorer's total) agrees with
    the candidates enumerated, also where a fused statement's own tiles and orders are not chosen."""
    op = load(Path(__file__).parent.parent / "examples" / name, {})
    assert count(op, SUNWAY)[0] == sum(1 for _ in candidates(op))


def test_a_loop_fused_into_k_beside_columns_in_m_makes_a_window_that_layouts_keep():
    """conv2d.sw at Ni = 3: output columns joined M, then kernel columns K. The input's box walks its
    column axis twice (the columns at the stride's step in M, the taps in K), beside the channels in K;
    a layout moves the box's axes with the axes they walk, and the box around it is the columns'
    span: (columns - 1) x stride + taps."""
    op = load(Path(__file__).parent.parent / "examples" / "conv2d.sw",
              {"B": 2, "Ni": 3, "No": 8, "Ri": 6, "Ci": 7, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1})
    module = transforms.split_loop(op.seed, "cCo", 2, "cCo_outer", "cCo_inner")
    module = transforms.fuse_into_primitive(module, "cCo_inner", "M")
    module = transforms.fuse_into_primitive(module, "cKc", "K")
    box = loop_nest(module.body)[1].operand("A")
    assert box.walks == (0, 1, 1, 2, 3) and box.dims == (None, "M", "K", "K", "M")
    assert box.steps == (1, 2, 1, 1, 1) and box.extents == (1, 2, 3, 3, 2)
    around = box.bounding_box()
    assert around.extents == (1, (2 - 1) * 2 + 3, 3, 2) and around.steps == ()
    laid_out = loop_nest(transforms.set_layout(module, "input", (0, 1, 3, 2)).body)[1].operand("A")
    assert laid_out.walks == (0, 1, 1, 2, 3) and laid_out.dims == (None, "M", "K", "M", "K")
    assert laid_out.steps == (1, 2, 1, 1, 1)
