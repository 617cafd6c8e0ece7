"""The host backend: every legal GEMM candidate computes C + A B at several shapes on 1 and 2 threads,
and with the AVX2 and generic code paths forced; hand-built modules exercise a transposed operand
layout, every statement and operator, and the IR's fused dimensions, multi-tile DMAs, zero-filled
DMAs and zeroed boxes; equal modules share one compiled program; failures are
CodegenErrors."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES, GEMM_SW, gemm_inputs, gemm_reference, relative_error, use_fresh_cache_dir
from swauto.api import compile as swauto_compile
from swauto.api import load
from swauto.backends.host import HostProgram, Knobs, codegen, compile_module, layout
from swauto.backends.host import threads as thread_pools
from swauto.backends.host.codegen import buffer_layouts, generate, plan_kernel
from swauto.backends.host.isa import ISAS, select
from swauto.backends.host.knobs import default_knobs, register_tile_choices
from swauto.backends.host.primitives import zeroed_sum
from swauto.errors import CodegenError
from swauto.frontend.check import BoundOperator, check
from swauto.frontend.parser import parse
from swauto.frontend.source import Source
from swauto.ir.expr import BinOp, Const, Expr, Var
from swauto.ir.nodes import (
    Access,
    Alloc,
    Call,
    Compare,
    Dma,
    DmaWait,
    For,
    If,
    Let,
    LocalBuffer,
    Module,
    Seq,
    Stmt,
    Tensor,
    Zero,
    gemm_call,
)
from swauto.ir.visitor import Rewriter, walk
from swauto.machine import HOST_MICRO_KERNELS, SUNWAY, local_memory_machine
from swauto.pipeline import lower
from swauto.reference import reference
from swauto.schedule.candidate import Candidate
from swauto.tuner import host_model
from swauto.tuner.space import explore

FUZZ = int(os.environ.get("SWAUTO_FUZZ") or 0)  # more random cases, not derandomized
SHAPES = [(256, 384, 128), (128, 128, 64), (384, 256, 96)]  # (M, N, K)
TOLERANCE = 1e-5


@cache
def legal_modules(shape: tuple[int, int, int]) -> dict[str, Module]:
    """The final IR of every legal candidate of examples/gemm.sw at `shape`, by candidate id."""
    source = Source.load(GEMM_SW)
    op = check(parse(source), source, dict(zip("MNK", shape, strict=True)))
    return {candidate.id: stages[-1][1] for candidate, stages in explore(op, SUNWAY).legal}


def _shared_module() -> Module:
    """A legal GEMM module whose parallel group has three iterations (two threads share them unevenly)."""
    for module in legal_modules((256, 384, 128)).values():
        if compile_module(module).parallel_iterations == 3:
            return module
    raise AssertionError("no candidate of GEMM 256 x 384 x 128 shares three iterations")


@pytest.mark.parametrize("pool", ["native", "python"])
def test_both_thread_pools_share_the_iterations(pool, monkeypatch):
    """On the native pool (libgomp, called from the kernel's 'parallel' function) and on the Python
    pool (forced by $SWAUTO_HOST_THREADS), every thread count gives GEMM's result."""
    monkeypatch.setenv(thread_pools.ENV_VAR, pool)
    if pool == "native" and not thread_pools.native():
        pytest.skip("libgomp cannot be loaded here")
    program = compile_module(_shared_module())
    assert ("parallel" in program.plan.symbols) == (pool == "native")
    for count in (2, 3):
        arrays = gemm_inputs(256, 384, 128, seed=count)
        expected = gemm_reference(arrays)
        program.run(arrays, threads=count)
        assert relative_error(arrays["C"], expected) <= TOLERANCE, count


@pytest.mark.parametrize("pool", ["native", "python"])
def test_each_nest_of_an_operator_of_several_statements_is_shared_by_the_threads(pool, monkeypatch):
    """Winograd's convolution is seven statements (the filter's and the input's transforms, the GEMMs,
    the output's transforms, the crop), each its own loop nest: each is a segment of its own
    (`parallel.segments`), whose nest the threads share on either pool (before, only one nest was
    shared and the others ran on the calling thread), and two threads give the reference's result."""
    monkeypatch.setenv(thread_pools.ENV_VAR, pool)
    if pool == "native" and not thread_pools.native():
        pytest.skip("libgomp cannot be loaded here")
    params = {"B": 3, "Ni": 5, "No": 6, "Ri": 7, "Ci": 9, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    kernel = swauto_compile(EXAMPLES / "conv2d_winograd.sw", params, target="host", threads=2)
    shared = [phases for phases in kernel.program.plan.segments if phases.loops]
    assert len(shared) == 8 and ("parallel" in kernel.program.plan.symbols) == (pool == "native")
    rng = np.random.default_rng(1)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32)
              for t in kernel.operator.seed.tensors if not t.is_local}
    expected = reference(kernel.operator, arrays)["output"]
    kernel(**arrays)
    assert relative_error(arrays["output"], expected) <= TOLERANCE


@pytest.mark.parametrize("head", [0, 1, 3])
def test_ranges_cover_the_iterations_once_the_first_shorter_by_its_head(head):
    """`split_range` cuts range(count) into contiguous ranges, one per thread (at most the parts, at most the
    units): count + head units as evenly as integers allow, the first thread's first `head` units being
    other work; without a head none is empty."""
    from swauto.backends.host.program import split_range

    for count in range(1, 9):
        for parts in range(1, 5):
            ranges = split_range(count, parts, head)
            assert len(ranges) == min(parts, count + head)
            assert ranges[0][0] == 0 and ranges[-1][1] == count
            assert all(hi == lo for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False))
            units = [head + ranges[0][1] - ranges[0][0], *(hi - lo for lo, hi in ranges[1:])]
            if head <= (count + head) // len(ranges):  # the head fits in the first thread's even share
                assert max(units) - min(units) <= 1, (count, parts, ranges)
            if not head:
                assert all(lo < hi for lo, hi in ranges)


@pytest.mark.parametrize("pool", ["native", "python"])
def test_a_peeled_last_tile_runs_alongside_the_threads_and_gives_the_same_result(pool, monkeypatch):
    """GEMM 200 x 160 x 72 in tiles of 48 x 48: where the parallel group is the outermost loop, its peeled
    last tile (a statement after the nest) touches no element the shares write, so it runs on the calling
    thread alongside the other threads' shares (`Phases.alongside`); on either pool two and three threads
    give GEMM's result. With a put of a tile the nest writes added after it, it would not run alongside."""
    from swauto.backends.host.parallel import segments

    monkeypatch.setenv(thread_pools.ENV_VAR, pool)
    if pool == "native" and not thread_pools.native():
        pytest.skip("libgomp cannot be loaded here")
    source = GEMM_SW.read_text()
    for dim, tiles in (("M", "48"), ("N", "48"), ("K", "32, 72")):
        start = source.index(f"split gemm.{dim} by {{")
        source = source[:start] + f"split gemm.{dim} by {{{tiles}}}" + source[source.index("}", start) + 1:]
    shape = (200, 160, 72)
    alongside = []
    for _, stages in explore(load(source, dict(zip("MNK", shape, strict=True))), local_memory_machine("host")).legal:
        last = segments(stages[-1][1])[-1]
        if last.alongside:
            alongside.append(stages[-1][1])
    assert len(alongside) >= 4
    for module in alongside[::len(alongside) // 4][:4]:
        for threads in (2, 3):
            arrays = gemm_inputs(*shape, seed=threads)
            expected = gemm_reference(arrays)
            compile_module(module).run(arrays, threads=threads)
            assert relative_error(arrays["C"], expected) <= TOLERANCE, threads
    module = alongside[0]
    put = next(node for node, _ in walk(segments(module)[-1].nest) if isinstance(node, Dma) and node.direction == "put")
    assert not segments(replace(module, body=Seq((*module.body.stmts, put))), verify=False)[-1].alongside


@pytest.mark.parametrize("pool", ["native", "python"])
def test_a_calling_thread_whose_share_is_all_tail_still_fills_its_prologue(pool, monkeypatch):
    """A GEMM candidate whose tail (a last N tile after the nest) is worth a whole iteration of the two it
    shares, so on two threads the calling thread's share is empty: it still runs its prologue (the A
    tile the tail reads) before the tail, on either pool (a first draft skipped it and read garbage)."""
    from swauto.backends.host.parallel import segments
    from swauto.backends.host.program import split_range

    monkeypatch.setenv(thread_pools.ENV_VAR, pool)
    if pool == "native" and not thread_pools.native():
        pytest.skip("libgomp cannot be loaded here")
    module = next(module for module in legal_modules((256, 384, 128)).values()
                  if (last := segments(module)[-1]).alongside and last.prologue
                  and split_range(last.iterations, 2, last.head)[0] == (0, 0))
    arrays = gemm_inputs(256, 384, 128, seed=5)
    expected = gemm_reference(arrays)
    compile_module(module).run(arrays, threads=2)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


def _thread_cores() -> dict[int, set[int]]:
    """The cores each thread of this process may run on, by thread id."""
    cores = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            cores[int(task.name)] = os.sched_getaffinity(int(task.name))
    return cores


def test_the_native_pools_workers_pin_themselves_and_leave_the_caller_free():
    """After a call on two threads, the team's worker runs on one core, not the caller's, and the
    calling thread may still run on every core it could before (see `threads`' docstring: a worker
    woken on the caller's core after a pause cost a scheduler tick per call)."""
    if not thread_pools.native() or len(os.sched_getaffinity(0)) < 2 or thread_pools._placement().cores < 2:
        pytest.skip("needs the native pool, two cores, and no OpenMP placement asked by the environment")
    caller = os.sched_getaffinity(0)
    compile_module(_shared_module()).run(gemm_inputs(256, 384, 128, seed=3), threads=2)
    assert os.sched_getaffinity(0) == caller
    others = {tid: cores for tid, cores in _thread_cores().items() if tid != threading.get_native_id()}
    pinned = [cores for cores in others.values() if len(cores) == 1]
    assert pinned and all(cores <= caller for cores in pinned), others


def test_off_linux_the_parallel_entry_has_no_pinning(monkeypatch):
    """Without `sched_setaffinity` (`threads.PINS` false) the generated code names neither it nor
    `sched_getcpu`, so the JIT has nothing to resolve there; on Linux it has both."""
    if not thread_pools.native():
        pytest.skip("libgomp cannot be loaded here")
    module, isa = _shared_module(), select()
    assert "sched_setaffinity" in str(generate(module, isa, default_knobs(isa)))
    monkeypatch.setattr(thread_pools, "PINS", False)
    code = str(generate(module, isa, default_knobs(isa)))
    assert "GOMP_parallel" in code and "sched_" not in code


def test_workers_do_not_pin_themselves_where_the_user_places_openmp_threads():
    """`OMP_PROC_BIND` (or `OMP_PLACES`, `GOMP_CPU_AFFINITY`) asks libgomp to place its threads: the
    workers then leave their cores as libgomp set them."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("with one core no worker pins itself anyway")
    script = "from swauto.backends.host import threads; print(threads._placement().cores)"
    free = {name: value for name, value in os.environ.items() if name not in thread_pools.USER_PLACEMENT}
    unset = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=free)
    assert unset.stdout.strip() == str(len(os.sched_getaffinity(0)))  # the control: workers pin themselves
    for name in thread_pools.USER_PLACEMENT:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                env={**os.environ, name: "close" if name == "OMP_PROC_BIND" else "0"})
        assert result.stdout.strip() == "0", name


def test_a_process_whose_workers_still_spin_in_libgomp_exits_cleanly():
    """A process that ran a kernel on two threads, with libgomp's workers spinning rather than sleeping
    between calls (`OMP_WAIT_POLICY=active`), exits with status 0: at exit llvmlite closes the libraries
    it loaded, and libgomp, unmapped under a spinning worker, crashed every such process with a
    segmentation fault; swauto now holds libgomp open (`threads._libgomp_loaded`)."""
    if not thread_pools.native() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs libgomp and two cores")
    # A schedule given: the kernel runs on the threads asked for, however small.
    script = ("import numpy as np, swauto\n"
              f"source, sizes = {str(GEMM_SW)!r}, {{'M': 256, 'N': 256, 'K': 256}}\n"
              "candidate = swauto.schedules(source, sizes, target='host')[0]\n"
              "k = swauto.compile(source, sizes, target='host', schedule=candidate, threads=2)\n"
              "a = np.ones((256, 256), np.float32); c = np.zeros_like(a); k(A=a, B=a, C=c)\n"
              "print(k.threads, c[0, 0])\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_WAIT_POLICY": "active"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["2", "256.0"]


@pytest.mark.parametrize(("m", "in_place"), [(4, True), (64, False)])
def test_a_vector_operand_read_once_is_left_in_place(m, in_place):
    """GEMM m x 512 x 256 (B's rows contiguous, cache-resident): with one row tile of the micro-kernel
    (m = 4) each element of B is read once, so B is read in place rather than packed (packing cost as
    much as the multiplication); with 16 row tiles it is packed. The host model charges an in-place
    operand at the rate of tiles in place, no copy, a packed one a copy; both compute GEMM."""
    source = Source.load(GEMM_SW)
    op = check(parse(source), source, {"M": m, "N": 512, "K": 256})
    candidate = Candidate((("K", 256), ("M", m), ("N", 128)), ("M_outer", "K_outer", "N_outer"), "M")
    module = lower(op, candidate, local_memory_machine("host"))[-1][1]
    program = compile_module(module, knobs=Knobs(4, 2))
    assert ("B_tile" in program.plan.views) == in_place
    # The model with the program's register tile (a calibration in a noisy phase may rank another first).
    predicted = host_model.estimate(module, 1, replace(host_model.machine(), register_tiles=((4, 2),)))
    assert (predicted.copy_bytes < 4 * 256 * 512) == in_place  # B's bytes are not copied (nor A's and C's: views)
    arrays = gemm_inputs(m, 512, 256)
    expected = gemm_reference(arrays)
    program.run(arrays, threads=1)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


@pytest.mark.parametrize("order", [("M_outer", "K_outer", "N_outer"), ("K_outer", "N_outer", "M_outer")])
def test_a_vector_operand_kept_for_several_calls_is_packed(order):
    """GEMM 8 x 512 x 256 in calls of 4 rows (one row tile each): B's tile is transferred once for the two
    calls of its columns (hoisted out of M_outer, whole or per N tile), so the calls read it again and it
    is packed; in place its rows are B's rows apart, which the caches keep badly (ResNet-50 res5_1x1b:
    2.2-2.7 ms in place against 1.1-1.3 packed). The host model charges the copy."""
    text = GEMM_SW.read_text().replace("split gemm.M by {128, 256, 512}", "split gemm.M by {4}") \
        .replace("split gemm.N by {128, 256, 512}", "split gemm.N by {128}")
    op = load(text, {"M": 8, "N": 512, "K": 256})
    module = lower(op, Candidate((("K", 256), ("M", 4), ("N", 128)), order, "M"), local_memory_machine("host"))[-1][1]
    program = compile_module(module, knobs=Knobs(4, 2))
    assert "B_tile" not in program.plan.views
    machine = replace(host_model.machine(), register_tiles=((4, 2),))  # the program's register tile
    assert host_model.estimate(module, 1, machine).copy_bytes >= 4 * 256 * 512  # B is copied
    arrays = gemm_inputs(8, 512, 256)
    expected = gemm_reference(arrays)
    program.run(arrays, threads=1)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


@pytest.mark.parametrize("tile_n", [32, 48, 64])
def test_a_vector_operand_tile_at_a_run_time_start_is_packed(tile_n):
    """B hoisted whole out of the N loop, each GEMM reading B_tile[:, N_outer * tile_n:+tile_n]: packed
    in panels of the largest part of the register tile's columns that the starts are multiples of (a
    tile of 2 x 4 AVX2 vectors, 32 columns: tiles of 32 or 64 columns start on panels of 32, of 48 off
    every panel of 32 but one of 16), not read in place, where its rows 4 KiB apart share L1 sets (GEMM
    1024 x 1024 x 256 with tiles of 256 x 32: 49 GFLOPS in place, 92 packed). Right on one and two threads."""
    m, n, k = 128, 16 * tile_n, 32
    op = load(GEMM_SW.read_text().replace("split gemm.N by {128, 256, 512}", f"split gemm.N by {{{tile_n}}}")
                            .replace("split gemm.M by {128, 256, 512}", "split gemm.M by {64}"),
              {"M": m, "N": n, "K": k})
    candidate = Candidate((("K", k), ("M", 64), ("N", tile_n)), ("M_outer", "K_outer", "N_outer"), "N")
    module = lower(op, candidate, local_memory_machine("host"))[-1][1]
    program = compile_module(module, "avx2", Knobs(2, 4))
    panel = {32: 32, 48: 16, 64: 32}[tile_n]
    assert "B_tile" not in program.plan.views and program.plan.layouts["B_tile"].axes[1].extents[-1] == panel
    for threads in (1, 2):
        arrays = gemm_inputs(m, n, k, seed=threads)
        expected = gemm_reference(arrays)
        program.run(arrays, threads=threads)
        assert relative_error(arrays["C"], expected) <= TOLERANCE


_PARENT_PROGRAMS: list = []  # the program the parent ran, inherited by the forked child


def _run_in_child() -> tuple[bool, float]:
    """In a forked child: whether it would use the native pool, and the error of a 2-thread GEMM run by
    the program the parent ran on the native pool (which planned its calls there)."""
    arrays = gemm_inputs(256, 384, 128, seed=7)
    expected = gemm_reference(arrays)
    _PARENT_PROGRAMS[0].run(arrays, threads=2)
    return thread_pools.native(), relative_error(arrays["C"], expected)


def test_a_forked_child_runs_threaded_kernels():
    """libgomp's team does not survive fork: a child forked after the parent ran a kernel on the native
    pool runs on the Python pool, and returns (it would wait forever for the parent's threads)."""
    program = compile_module(_shared_module())
    program.run(gemm_inputs(256, 384, 128), threads=2)
    _PARENT_PROGRAMS[:] = [program]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        native, error = pool.apply_async(_run_in_child).get(timeout=120)
    assert not native and error <= TOLERANCE


# Every candidate at the smallest shape; every sixth at the two others (each space is the product of
# the same choices at other tile counts), so the suite stays fast; every candidate of each under
# SWAUTO_EXHAUSTIVE. One test per shape: parametrizing by candidate
# would build the three spaces while collecting, in every test process (9 s each).
SAMPLE = {} if os.environ.get("SWAUTO_EXHAUSTIVE") else {(256, 384, 128): 6, (384, 256, 96): 6}


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, shape)) for shape in SHAPES])
def test_every_legal_candidate_computes_gemm_on_one_and_two_threads(shape):
    modules = list(legal_modules(shape).items())[::SAMPLE.get(shape, 1)]
    for candidate, module in modules:
        program = compile_module(module)
        for threads in (1, 2):
            arrays = gemm_inputs(*shape)
            expected = gemm_reference(arrays)
            program.run(arrays, threads=threads)
            assert relative_error(arrays["C"], expected) <= TOLERANCE, f"candidate {candidate}, threads={threads}"


@pytest.mark.parametrize("isa", ["avx2", "generic"])
def test_every_candidate_is_right_with_a_narrower_isa_forced(isa):
    if ISAS[isa].width > select().width:
        pytest.skip(f"this CPU cannot run {isa}")
    shape = (128, 128, 64)
    for candidate, module in legal_modules(shape).items():
        program = compile_module(module, isa=isa)
        assert program.isa == isa
        arrays = gemm_inputs(*shape)
        expected = gemm_reference(arrays)
        program.run(arrays, threads=2)
        assert relative_error(arrays["C"], expected) <= TOLERANCE, candidate


def test_the_environment_forces_the_isa_and_forced_code_has_no_wider_vectors(monkeypatch):
    monkeypatch.setenv("SWAUTO_HOST_ISA", "avx2")
    module = transposed_gemm_module(64, 48, 96, tile_k=32)
    program = compile_module(module)
    assert program.isa == "avx2"
    assert "<16 x float>" not in program.llvm_ir and "<8 x float>" in program.llvm_ir


# Odd register tiles, and every tile calibration may choose for each instruction set (forced).
TILES = [(None, knobs) for knobs in (Knobs(1, 1), Knobs(3, 2), Knobs(5, 1), Knobs(3, 3), Knobs(7, 3))] + [
    (isa, knobs) for isa in ISAS for knobs in register_tile_choices(ISAS[isa])]


@pytest.mark.parametrize(("isa", "knobs"), TILES, ids=[f"{isa or 'native'}-{k.rows}x{k.vectors}" for isa, k in TILES])
def test_micro_kernel_shapes_with_edges_in_every_direction(isa, knobs):
    if isa is not None and ISAS[isa].width > select().width:
        pytest.skip(f"this CPU cannot run {isa}")
    if not knobs.fits(select(isa)):
        pytest.skip(f"{knobs} needs more vector registers than this CPU's {select().name} has")
    # M=45, N=37 leave partial row and column tiles and single-lane columns for every register tile;
    # N=24 and N=5, a tile of fewer column groups than the register tile's vectors (more rows); N=56, seven
    # vectors of AVX2 in column tiles of two widths (3 + 2 + 2 in a 3-vector tile: `Knobs.column_tiles`).
    for m, n, k in ((45, 37, 19), (45, 24, 19), (45, 5, 3), (13, 56, 5)):
        arrays = gemm_inputs(m, n, k, seed=3)
        arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
        expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
        module = transposed_gemm_module(m, n, k, tile_k=k, vectorize="N")
        compile_module(module, isa=isa, knobs=knobs).run(arrays)
        assert relative_error(arrays["C"], expected) <= TOLERANCE, (m, n, k)


def test_columns_are_cut_into_the_fewest_register_tiles_as_even_as_they_go():
    """`Knobs.column_tiles`: every vector covered once, by the fewest tiles of at most the register
    tile's vectors, whose widths differ by one at most (4 vectors in 3-vector tiles: 2 + 2, not 3 + 1)."""
    assert Knobs(4, 3).column_tiles(4) == ((2, 2),)
    assert Knobs(4, 3).column_tiles(7) == ((3, 1), (2, 2))
    assert Knobs(4, 3).column_tiles(128) == ((3, 42), (2, 1))
    for vectors in range(1, 6):
        for slots in range(1, 40):
            runs = Knobs(1, vectors).column_tiles(slots)
            assert sum(width * count for width, count in runs) == slots
            assert sum(count for _, count in runs) == -(-slots // vectors)
            widths = [width for width, _ in runs]
            assert max(widths) <= vectors and max(widths) - min(widths) <= 1


@pytest.mark.parametrize("isa", ISAS)
def test_a_narrower_column_tile_takes_as_many_accumulators_within_the_registers(isa):
    """`Knobs.rows_for`: a column tile of fewer vectors than the register tile's gets more rows, as
    many accumulators as the register tile (4 x 4 -> 16 x 1, 8 x 2, 6 x 3), never more registers than
    the instruction set has, and the register tile's rows where it is as wide."""
    avx512 = ISAS["avx512"]
    assert Knobs(4, 4).rows_for(4, avx512) == 4 and Knobs(4, 4).rows_for(9, avx512) == 4
    assert [Knobs(4, 4).rows_for(v, avx512) for v in (1, 2, 3)] == [16, 8, 6]
    for knobs in register_tile_choices(ISAS[isa]):
        for vectors in range(1, knobs.vectors):
            rows = knobs.rows_for(vectors, ISAS[isa])
            assert rows >= knobs.rows and Knobs(rows, vectors).fits(ISAS[isa]), (knobs, vectors)


def test_row_tiles_keep_to_the_rows_of_two_axes_where_half_the_rows_or_more_allow():
    """`aligned_rows`: rows over two axes (16 columns x 8 images, a stride jump between columns) go in
    tiles that hold whole groups of 8 or lie within one (13 -> 8, 5 -> 4), affine rows in the most."""
    from swauto.backends.host.microkernel import aligned_rows

    columns_by_images = [column * 1000 + image for column in range(16) for image in range(8)]
    assert aligned_rows([columns_by_images], 128, 13) == 8
    assert aligned_rows([columns_by_images], 128, 5) == 4
    assert aligned_rows([columns_by_images, list(range(128))], 128, 16) == 16
    assert aligned_rows([list(range(0, 256, 2))], 128, 13) == 13
    assert aligned_rows([[column * 1000 + image for column in range(3) for image in range(7)]], 21, 5) == 5  # none


def test_a_one_vector_tile_of_rows_read_in_place_keeps_to_one_run_of_them():
    """`rows_of_one_run`: 16 columns x 8 images read in place, consecutive within a column: a one-vector
    tile of 24 rows (three columns) takes 8 (one); runs shorter than 8 rows, rows not consecutive, and
    tiles within one run already keep theirs."""
    from swauto.backends.host.microkernel import rows_of_one_run

    def columns_by_images(images: int) -> list[int]:
        return [column * 256 + image for column in range(16) for image in range(images)]

    assert rows_of_one_run([columns_by_images(8), list(range(128))], 128, 24) == 8
    assert rows_of_one_run([columns_by_images(8)], 128, 8) == 8
    assert rows_of_one_run([columns_by_images(4)], 64, 24) == 24  # 4 accumulators would not hide the latency
    assert rows_of_one_run([list(range(0, 256, 2))], 128, 24) == 24
    assert rows_of_one_run([list(range(128))], 128, 24) == 24


def test_a_one_vector_convolution_at_batch_8_read_in_place_computes_the_reference():
    """MobileNetV2 block0.0.project's shape, smaller: 32 -> 16 channels (one vector), B = 8 innermost in
    the input, 4 columns per call and 2 in the last (32 and 16 rows: tiles of one column's 8 images,
    `rows_of_one_run`)."""
    params = {"B": 8, "Ni": 32, "No": 16, "Ri": 6, "Ci": 6, "Kr": 1, "Kc": 1, "stride": 1, "pad": 0}
    op = load(EXAMPLES / "conv2d.sw", params)
    candidate = Candidate((("K", 32), ("N", 16), ("cCo", 4), ("cRo", 1)),
                          ("cKr", "cKc", "N_outer", "K_outer", "cRo_outer", "cCo_outer"), "M",
                          (("input", (0, 1, 2, 3)), ("output", (0, 1, 3, 2)), ("weight", (0, 1, 3, 2))))
    module = lower(op, candidate, local_memory_machine("host"))[-1][1]
    program = compile_module(module)
    assert program.plan.views.get("input_tile") == "input"  # the broadcast rows read in place
    rng = np.random.default_rng(5)
    declared = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, {name: array.copy() for name, array in declared.items()})
    arrays = {t.name: np.ascontiguousarray(declared[t.name].transpose(t.layout or range(len(t.shape))))
              for t in module.tensors}
    program.run(arrays)
    output = next(t for t in module.tensors if t.name == "output")
    result = arrays["output"].transpose(np.argsort(output.layout)) if output.layout else arrays["output"]
    assert relative_error(result, expected["output"]) <= TOLERANCE


def test_the_micro_kernel_vectorizes_cs_innermost_axis_longer_than_one():
    def box(name: str, extents: tuple[int, ...], dims: tuple[str, ...]) -> Access:
        return Access(name, tuple(Const(0) for _ in extents), extents, dims)

    # C[Co, No, B] with B = 1 (a convolution's output): N, whose axis is contiguous, not the 1-long M axis.
    gemm = gemm_call(32, 128, 64, box("A", (32, 64, 1), ("M", "K", "M")), box("B", (128, 64), ("N", "K")),
                box("C", (32, 128, 1), ("M", "N", "M")), "M")
    assert layout.vector_dim(gemm) == "N"


def test_the_vector_operand_gives_whole_vectors_when_packed_or_vectorized_innermost():
    def box(name: str, extents: tuple[int, ...], dims: tuple[str, ...]) -> Access:
        return Access(name, tuple(Const(0) for _ in extents), extents, dims)

    def gemm(a: Access) -> Call:  # C[N, M]: the micro-kernel vectorizes M, so A is the vector operand
        return gemm_call(32, 16, 64, a, box("B", (64, 16), ("K", "N")), box("C", (16, 32), ("N", "M")), "M")

    assert layout.whole_vectors(gemm(box("A", (64, 32), ("K", "M"))), Knobs(4, 4), 16)  # M innermost
    assert layout.whole_vectors(gemm(box("A", (32, 64), ("M", "K"))), Knobs(4, 4), 16)  # one M axis: packed
    # M over two axes (pixels x batch) with K innermost: neither packed nor contiguous.
    assert not layout.whole_vectors(gemm(box("A", (2, 16, 64), ("M", "M", "K"))), Knobs(4, 4), 16)


def test_tiles_of_cache_resident_tensors_are_views_and_others_copies():
    module = next(iter(legal_modules((128, 128, 64)).values()))
    isa = select()
    knobs = Knobs(*HOST_MICRO_KERNELS[isa.name][0])
    ignored = frozenset(b.name for b in module.buffers if b.dtype == "float64")
    placed, views = layout.plan(module, knobs, isa.width, ignored, views_allowed=True)
    gemm = next(node for node, _ in walk(module.body) if isinstance(node, Call))
    vector = layout.gemm_roles(gemm)["vector"][1].name
    # The C tile is read and written in place; the vector operand stays packed (a copy).
    assert views[gemm.operand("C").name] == "C" and vector not in views and len(placed[vector].axes[-1].extents) == 2
    assert layout.plan(module, knobs, isa.width, ignored, views_allowed=False)[1] == {}
    # A zero-filled transfer whose box stays inside the tensor moves what a plain one does: still a view.
    zero_filled = replace(module, body=Rewrite().rewrite(module.body))
    assert layout.plan(zero_filled, knobs, isa.width, ignored, views_allowed=True)[1] == views
    # One whose box may leave it (a boundary tile) is no view where a GEMM reads it: its buffer holds zeros
    # the tensor lacks, which only maps make up for (`layout.clipped_axes`).
    leaving = replace(module, body=Rewrite(shift=-1).rewrite(module.body))
    assert layout.plan(leaving, knobs, isa.width, ignored, views_allowed=True)[1] == {}



# Maps that read a padded input at stride 1, at odd sizes: their zero-filled input tiles reach outside it.
# (Overwriting: the depthwise convolution as PyTorch computes it, its output tiles zeroed, then summed.)
PADDED_MAPS = {
    "conv2d_depthwise": {"B": 3, "C": 37, "Ri": 7, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    "conv2d_depthwise overwriting": {"B": 2, "C": 21, "Ri": 6, "Ci": 9, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1},
    "maxpool": {"B": 3, "C": 5, "Ri": 7, "Ci": 6, "K": 3, "stride": 1, "pad": 1},
}


def _clipped_views(kernel) -> dict[str, tuple[int, ...]]:
    isa = select()
    return plan_kernel(kernel.module, isa, default_knobs(isa)).clipped


def _zeroings_left_out(module) -> int:
    """The zeroings the host leaves out of `module`, the map after each starting its sums from 0."""
    return sum(isinstance(zero, Zero) and zeroed_sum(zero, after) is not None
               for node, _ in walk(module.body) if isinstance(node, Seq)
               for zero, after in zip(node.stmts, node.stmts[1:], strict=False))


# A depthwise convolution on [B, H, W, C] tensors (PyTorch's channels-last) with columns fused into M: M
# runs over the batch, then the columns, so its clipped column axis is not M's outermost (a digit test).
DEPTHWISE_BATCH_FIRST = """
operator depthwise_batch_first(B = 2, C = 5, Ri = 6, Ci = 7, Kr = 3, Kc = 3, pad = 1) {
  let Ro = Ri + 2 * pad - Kr + 1
  let Co = Ci + 2 * pad - Kc + 1
  tensor input[B, Ri, Ci, C] padded
  tensor weight[Kr, Kc, C]
  tensor output[B, Ro, Co, C]
  compute {
    for r in 0..Ro { for c in 0..Co { for kr in 0..Kr { for kc in 0..Kc {
      macc(M = B, N = C, X = input[:M, r + kr - pad, c + kc - pad, :N], Y = weight[kr, kc],
           Z += output[:M, r, c, :N])
    } } } }
  }
  schedule {
    split c by {1, 4}
    fuse c.inner into macc.M
    reorder any with kc innermost
  }
}
"""
PADDED_MAPS["depthwise batch first"] = {"B": 2, "C": 5, "Ri": 6, "Ci": 7}


@pytest.mark.parametrize("name", sorted(PADDED_MAPS))
def test_maps_read_a_padded_input_in_place_taking_zeros_outside_it(name):
    """Input tiles of maps that reach outside a padded tensor (zero-filled gets) are views of the tensor
    that the maps clip, taking 0 for the elements outside (`layout.clipped_axes`), in part of the space;
    an output tile zeroed before a map sums into it is not zeroed, the sums starting from 0 (`zeroed_sum`):
    every sampled candidate, on one thread and on two, computes the reference's result."""
    params = PADDED_MAPS[name]
    example, _, variant = name.partition(" ")
    text = DEPTHWISE_BATCH_FIRST if name == "depthwise batch first" else (EXAMPLES / f"{example}.sw").read_text()
    if variant == "overwriting":
        text = text.replace("Z += output[", "Z = output[")
    op = load(text, params)
    space = explore(op, local_memory_machine("host")).candidates
    sample = [space[i] for i in np.random.default_rng(0).choice(len(space), 8, replace=False)]
    rng = np.random.default_rng(1)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors if not t.is_local}
    if example == "maxpool":  # zeros outside the image: the window's largest value where the input is >= 0
        arrays["input"] = np.abs(arrays["input"])
    expected = reference(op, arrays)["output"]
    clipped = left_out = 0
    for index, candidate in enumerate(sample):
        kernel = swauto_compile(text, params, target="host", schedule=candidate, threads=1 + index % 2)
        views = _clipped_views(kernel)
        spatial = {1, 2} if name == "depthwise batch first" else {0, 1}
        assert all(set(axes) <= spatial for axes in views.values()), views  # rows and columns only
        clipped += bool(views)
        left_out += _zeroings_left_out(kernel.module) > 0
        result = {key: value.copy() for key, value in arrays.items()}
        kernel(**result)
        assert relative_error(result["output"], expected) < 1e-5, candidate.id
    assert clipped >= 3, f"{clipped} of 8 candidates read the input through a clipped view"
    assert left_out >= 2 if variant == "overwriting" else left_out == 0, left_out


def test_a_map_whose_innermost_dimension_crosses_the_padding_reads_a_zero_filled_copy():
    """Max pooling with its columns fused into N, the innermost dimension of the code a map runs (the
    validity of a point would change along its vectors): the input tiles stay zero-filled copies."""
    params = PADDED_MAPS["maxpool"]
    text = (EXAMPLES / "maxpool.sw").read_text().replace("fuse c.inner into reduce_max.M",
                                                         "fuse c.inner into reduce_max.N")
    source = Source("maxpool_columns_in_n.sw", text)
    op = check(parse(source), source, params)
    fused = [c for c in explore(op, local_memory_machine("host")).candidates if dict(c.splits)["c"] > 1]
    assert fused
    rng = np.random.default_rng(2)
    arrays = {"input": np.abs(rng.standard_normal(op.seed.tensor("input").shape)).astype(np.float32)}
    expected = reference(op, arrays)["output"]
    for candidate in fused[:4]:
        kernel = swauto_compile(text, params, target="host", schedule=candidate)
        assert _clipped_views(kernel) == {}
        result = {**arrays, "output": np.zeros(expected.shape, np.float32)}
        kernel(**result)
        assert relative_error(result["output"], expected) < 1e-5, candidate.id


def _overwriting_gemm(shape: tuple[int, int, int], tile_k: int) -> tuple[Module, str]:
    """The final IR of `C = A x B` (examples/gemm.sw, overwriting) in tiles of 128 x 128 x `tile_k`; its C tile."""
    text = Path(GEMM_SW).read_text().replace("C += C", "C = C")
    source = Source("overwriting_gemm.sw", text)
    op = check(parse(source), source, dict(zip("MNK", shape, strict=True)))
    candidate = Candidate((("K", tile_k), ("M", 128), ("N", 128)), ("M_outer", "N_outer", "K_outer"), "M")
    module = lower(op, candidate, local_memory_machine("host"))[-1][1]
    return module, next(node for node, _ in walk(module.body) if isinstance(node, Call)).output.name


@pytest.mark.parametrize("tile_k", [32, 128])
def test_an_overwritten_output_tile_is_written_in_place_before_its_put(tile_k):
    """A C tile the GEMMs overwrite (`C = A x B`: no get) and one put moves out is a view of the put's box
    where the tensors stay in cache: the calls write the output where it lies, the view pointed at the box
    before its first write (the call, or the zeroing the K loop's calls accumulate onto). Not where another
    transfer of the output sits between the writer and the put (the box written early would meet it), nor
    where the output is read (a get would see it written before its put), nor a map's output tile alone.
    The kernels compute the product on 1 and 2 threads."""
    module, c_tile = _overwriting_gemm((256, 384, 128), tile_k)
    put = next(node for node, _ in walk(module.body) if isinstance(node, Dma) and node.buffer.name == c_tile)
    assert put.direction == "put" and sum(isinstance(node, Dma) and node.buffer.name == c_tile
                                          for node, _ in walk(module.body)) == 1
    isa = select()
    knobs = Knobs(*HOST_MICRO_KERNELS[isa.name][0])
    assert layout.plan(module, knobs, isa.width, frozenset(), views_allowed=True)[1][c_tile] == "C"
    arrays = gemm_inputs(256, 384, 128, seed=11)
    expected = arrays["A"].astype(np.float64) @ arrays["B"]
    program = compile_module(module, knobs=knobs)
    assert program.plan.views[c_tile] == "C"
    for threads in (1, 2):
        arrays["C"][...] = np.nan  # overwritten: none of it is read
        program.run(arrays, threads=threads)
        assert relative_error(arrays["C"], expected) <= TOLERANCE

    class Insert(Rewriter):  # `stmt` first in the block that holds the put, or right before the put
        def __init__(self, stmt: Stmt, first: bool) -> None:
            self.stmt, self.first = stmt, first

        def rewrite_Seq(self, block: Seq) -> Stmt:
            stmts = [self.rewrite(child) for child in block.stmts]
            if any(child is put for child in stmts):
                stmts.insert(0 if self.first else next(i for i, child in enumerate(stmts) if child is put), self.stmt)
            return Seq(tuple(stmts))

    def block_of_put(body: Stmt) -> Seq:
        return next(node for node, _ in walk(body) if isinstance(node, Seq) and any(c is put for c in node.stmts))

    start = layout.written_view_start(block_of_put(module.body), put)
    # Zeroed, then the K loop accumulates into it; or overwritten by its one call.
    assert start is not None and isinstance(block_of_put(module.body).stmts[start], Zero if tile_k < 128 else Call)
    other = replace(put, buffer=replace(put.buffer, name="other"), reply="other_done")
    met = Insert(other, first=False).rewrite(module.body)
    assert layout.written_view_start(block_of_put(met), put) is None
    read = replace(module, body=Insert(replace(other, direction="get"), first=True).rewrite(module.body))
    assert c_tile not in layout.plan(read, knobs, isa.width, frozenset(), views_allowed=True)[1]
    # A map's output tile alone stays a copy: `z = x + y` reads x and y in place and copies z out.
    add = host_model._add_module(4 * host_model.STREAM_TILE, host_model.STREAM_TILE)
    assert layout.plan(add, knobs, isa.width, frozenset(), views_allowed=True)[1] == {"x_tile": "x", "y_tile": "y"}


def test_tiles_of_tensors_beyond_the_l3_are_views_only_where_calibration_measured_them_faster(monkeypatch):
    """Beyond half the L3 the plan holds tiles in place only with `Knobs.dram_views` (calibration measured GEMMs
    whose tensors pass the L3 faster so: `Machine.dram_views`), then as it would in cache; a kernel compiled
    through `swauto.compile` follows the calibration, the model prices the same views, and the product is right."""
    op = load(GEMM_SW, {"M": 256, "N": 256, "K": 256})
    module = lower(op, Candidate((("K", 128), ("M", 128), ("N", 128)), ("K_outer", "M_outer", "N_outer"), "M"),
                   local_memory_machine("host"))[-1][1]
    l2 = (1 << 20, 16)
    small_l3 = 64 << 10  # the tensors (768 KiB; the kernel's below, about 400) beyond half of it

    def views(dram_views: bool, l3: int) -> dict[str, str]:
        return buffer_layouts(module, Knobs(4, 2, dram_views=dram_views), 8, l3, l2)[1]

    assert views(False, small_l3) == {}
    assert views(True, small_l3) == views(False, 64 << 20) != {}
    monkeypatch.setattr(codegen, "cache_sizes", lambda: (48 << 10, 1 << 20, small_l3))
    for dram_views in (False, True):
        calibration = replace(host_model.machine(), dram_views=dram_views, l3_bytes=small_l3)
        monkeypatch.setattr(host_model, "machine", lambda cache_dir=None, calibration=calibration: calibration)
        kernel = swauto_compile(GEMM_SW, {"M": 96, "N": 512, "K": 64}, target="host", threads=1)
        assert kernel.program.knobs.dram_views is dram_views
        assert bool(kernel.program.plan.views) is dram_views
        arrays = gemm_inputs(96, 512, 64)
        expected = gemm_reference(arrays)
        kernel(**arrays)
        assert relative_error(arrays["C"], expected) <= TOLERANCE


def test_without_output_views_c_tiles_whose_rows_share_l1_sets_are_copies_and_the_others_views(monkeypatch):
    """Where calibration measured GEMMs faster with their C tiles copied in and out than in place
    (`Machine.output_views` false: a Zen 3), the plan copies, padded, C tiles whose register tiles' rows
    share L1 sets in place (C's rows 2 KiB apart or a multiple of it) and keeps the other views, C tiles
    whose rows do not share them included (rows 1 KiB apart); a kernel compiled through `swauto.compile`
    follows the calibration and computes the same product."""
    def modules(n: int) -> tuple[Module, str, str]:
        op = load(GEMM_SW, {"M": 256, "N": n, "K": 256})
        module = lower(op, Candidate((("K", 128), ("M", 128), ("N", 128)), ("K_outer", "M_outer", "N_outer"), "M"),
                       local_memory_machine("host"))[-1][1]
        gemm = next(node for node, _ in walk(module.body) if isinstance(node, Call))
        return module, gemm.output.name, layout.gemm_roles(gemm)["broadcast"][1].name

    def plan(module: Module, output_views: bool) -> tuple[dict[str, layout.Layout], dict[str, str]]:
        return layout.plan(module, Knobs(4, 2, output_views), 8, frozenset(), views_allowed=True)

    sharing, c_tile, broadcast = modules(512)  # C's rows 2 KiB apart
    assert plan(sharing, True)[1] == {c_tile: "C", broadcast: "A"}
    placed, views = plan(sharing, False)
    assert views == {broadcast: "A"} and placed[c_tile].size > 0
    apart, c_tile, broadcast = modules(256)  # 1 KiB apart: the 6 rows of a Zen 3 tile in 4 groups of sets
    assert plan(apart, False)[1] == plan(apart, True)[1] == {c_tile: "C", broadcast: "A"}
    copying = replace(host_model.machine(), output_views=False)
    # What every caller compiles a candidate with: its tile (or the ISA's default) and the calibration's choice.
    assert copying.knobs((4, 3)) == Knobs(4, 3, False, copying.dram_views)
    assert copying.knobs(None) == replace(default_knobs(select()), output_views=False, dram_views=copying.dram_views)
    monkeypatch.setattr(host_model, "machine", lambda cache_dir=None: copying)
    kernel = swauto_compile(GEMM_SW, {"M": 96, "N": 512, "K": 64}, target="host", threads=1)
    assert kernel.program.knobs.output_views is False
    arrays = gemm_inputs(96, 512, 64)
    expected = gemm_reference(arrays)
    kernel(**arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE
    assert not any(tensor == "C" for tensor in kernel.program.plan.views.values())


def test_broadcast_rows_whose_register_tile_overflows_an_l1_set_are_copies():
    """A register tile whose broadcast rows, read in place, put more lines in one L1 set than it has ways
    (A's rows 4 KiB apart: every row in the same set of a 32 KiB, 8-way L1) has them copied, padded off
    those sets; a tile of fewer rows than ways, or rows that fall in different sets (K = 1040), keeps the
    view; a kernel compiled with a tile that copies computes the same product."""
    def module(k: int) -> Module:
        op = load(GEMM_SW, {"M": 256, "N": 128, "K": k})
        return lower(op, Candidate((("K", 256), ("M", 128), ("N", 128)), ("K_outer", "M_outer", "N_outer"), "M"),
                     local_memory_machine("host"))[-1][1]

    def planned(k: int, rows: int) -> tuple[layout.Layout, bool]:
        lowered = module(k)
        gemm = next(node for node, _ in walk(lowered.body) if isinstance(node, Call))
        broadcast = layout.gemm_roles(gemm)["broadcast"][1].name
        placed, views = layout.plan(lowered, Knobs(rows, 2), 16, frozenset(), views_allowed=True, l1=(32 << 10, 8))
        return placed[broadcast], broadcast in views

    copied, viewed = planned(1024, 14)
    assert not viewed and copied.axes[0].strides[0] % 1024 != 0
    assert planned(1024, 8)[1] and planned(1040, 14)[1]
    arrays = gemm_inputs(256, 128, 1024)
    expected = gemm_reference(arrays)
    compile_module(module(1024), knobs=Knobs(12, 1)).run(arrays, threads=1)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


def test_calls_of_one_program_from_two_threads_plan_its_steps_one_at_a_time(monkeypatch):
    """The first call for a thread count plans its steps, allocating the workspaces every call then shares:
    two Python threads calling one program at once plan under its lock, one after the other (planned
    outside it, both allocated workspaces at once), and both compute the product."""
    kernel = swauto_compile(GEMM_SW, {"M": 64, "N": 64, "K": 64}, target="host", threads=1)
    program = kernel.program
    planning, most = [0], [0]
    plan_steps = program._plan_steps

    def slow_plan(threads: int, forked: bool) -> list:
        planning[0] += 1
        most[0] = max(most[0], planning[0])
        threading.Event().wait(0.05)  # long enough for the other thread to reach the plan
        try:
            return plan_steps(threads, forked)
        finally:
            planning[0] -= 1

    monkeypatch.setattr(program, "_plan_steps", slow_plan)
    inputs = [gemm_inputs(64, 64, 64) for _ in range(2)]
    expected = [gemm_reference(arrays) for arrays in inputs]
    callers = [threading.Thread(target=program.run, args=(arrays, 1)) for arrays in inputs]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert most[0] == 1
    assert all(relative_error(arrays["C"], want) <= TOLERANCE for arrays, want in zip(inputs, expected, strict=True))


class Rewrite(Rewriter):
    """Marks every get zero-filled, its tensor box moved by `shift` along the first axis."""

    def __init__(self, shift: int = 0) -> None:
        self.shift = shift

    def rewrite_Dma(self, node: Dma) -> Dma:
        if node.direction != "get":
            return node
        first, *rest = node.tensor.starts
        moved = replace(node.tensor, starts=(first + self.shift, *rest)) if self.shift else node.tensor
        return replace(node, zero_fill=True, tensor=moved)


def test_inputs_are_left_alone_and_code_is_optimised_llvm_ir():
    shape = (256, 384, 128)
    # The first candidate whose loops over C's tiles can run in parallel.
    program = next(p for p in map(compile_module, legal_modules(shape).values()) if p.parallel_iterations >= 2)
    arrays = gemm_inputs(*shape)
    a, b = arrays["A"].copy(), arrays["B"].copy()
    program.run(arrays)
    assert np.array_equal(arrays["A"], a) and np.array_equal(arrays["B"], b)
    assert "define void @swauto_gemm_before(" in program.llvm_ir
    assert "define void @swauto_gemm_loop(" in program.llvm_ir and program.parallel_iterations >= 2
    assert "noalias" in program.llvm_ir
    assert "_double" not in program.llvm_ir
    assert f"llvm.fma.v{select().width}f32" in program.llvm_ir


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
            gemm_call(m, n, tile_k,
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


def packed_rows_module(m: int, n: int, k: int, tile_k: int) -> Module:
    """C[N, M] += A[M, K] B[K, N] over K tiles: the micro-kernel vectorizes M, so each tile of A (K contiguous
    in the tensor) is packed in micro-panels along M, a transposing copy."""
    k0 = BinOp("*", Var("k_outer"), Const(tile_k))
    return Module(
        "packed_rows",
        (Tensor("A", (m, k)), Tensor("B", (k, n)), Tensor("C", (n, m), is_output=True)),
        (LocalBuffer("A_tile", (m, tile_k)), LocalBuffer("B_tile", (tile_k, n)), LocalBuffer("C_tile", (n, m))),
        Seq((
            Dma("get", _box("C", (0, 0), (n, m), "NM"), _box("C_tile", (0, 0), (n, m), "NM"), "c"), DmaWait("c"),
            For("k_outer", Const(0), Const(k // tile_k), 1, Seq((
                Dma("get", _box("A", (0, k0), (m, tile_k), "MK"), _box("A_tile", (0, 0), (m, tile_k), "MK"), "a"),
                Dma("get", _box("B", (k0, 0), (tile_k, n), "KN"), _box("B_tile", (0, 0), (tile_k, n), "KN"), "b"),
                DmaWait("a"), DmaWait("b"),
                gemm_call(m, n, tile_k, _box("A_tile", (0, 0), (m, tile_k), "MK"),
                          _box("B_tile", (0, 0), (tile_k, n), "KN"), _box("C_tile", (0, 0), (n, m), "NM")),
            ))),
            Dma("put", _box("C", (0, 0), (n, m), "NM"), _box("C_tile", (0, 0), (n, m), "NM"), "w"), DmaWait("w"),
        )),
    )


@pytest.mark.parametrize("isa", [None, "avx2", "generic"])
@pytest.mark.parametrize(("m", "k", "tile_k"), [(64, 96, 48), (96, 74, 37), (32, 16, 16)])
def test_a_packing_copy_transposes_whole_blocks_in_registers_and_the_rest_by_element(isa, m, k, tile_k):
    if isa is not None and ISAS[isa].width > select().width:
        pytest.skip(f"this CPU cannot run {isa}")
    n = 3
    module = packed_rows_module(m, n, k, tile_k)
    chosen = select(isa)
    knobs = default_knobs(chosen)
    assert layout.plan(module, knobs, chosen.width, frozenset(), False)[0]["A_tile"].axes[0].extents[1] > 1  # packed
    assert "copy.A.A_tile.transposed" in str(generate(module, chosen, knobs))
    rng = np.random.default_rng(5)
    arrays = {"A": rng.standard_normal((m, k), dtype=np.float32), "B": rng.standard_normal((k, n), dtype=np.float32),
              "C": rng.standard_normal((n, m), dtype=np.float32)}
    expected = arrays["C"].astype(np.float64) + (arrays["A"].astype(np.float64) @ arrays["B"]).T
    compile_module(module, isa=isa).run(arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


@settings(max_examples=FUZZ or 12, deadline=None, derandomize=not FUZZ, database=None)
@given(m=st.integers(1, 80), n=st.integers(1, 5), tile_k=st.integers(1, 40), tiles=st.integers(1, 3),
       isa=st.sampled_from([None, "avx2", "generic"]))
def test_packing_copies_of_any_shape_move_every_element(m, n, tile_k, tiles, isa):
    """Blocks where the copy transposes whole ones, elements where the tile's rows or K leave a part block,
    or its rows are no whole panels (`_transposes` declines)."""
    if isa is not None and ISAS[isa].width > select().width:
        isa = None
    k = tile_k * tiles
    rng = np.random.default_rng(m * 1000 + k)
    arrays = {"A": rng.standard_normal((m, k), dtype=np.float32), "B": rng.standard_normal((k, n), dtype=np.float32),
              "C": rng.standard_normal((n, m), dtype=np.float32)}
    expected = arrays["C"].astype(np.float64) + (arrays["A"].astype(np.float64) @ arrays["B"]).T
    compile_module(packed_rows_module(m, n, k, tile_k), isa=isa).run(arrays)
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
        (LocalBuffer("T", (1,)), LocalBuffer("T_double", (1,), "float64", copy_of="T")),
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
        generate(module, ISAS["generic"], Knobs(4, 2))


def test_a_gemm_operand_missing_a_dimension_is_a_codegen_error():
    module = transposed_gemm_module(64, 48, 96, tile_k=32)
    gemm = module.body.stmts[5].body.stmts[4]
    missing_k = _box("A_tile", (0, 0), (32, 64), (None, "M"))
    bad = gemm.with_operands(lambda role, access: missing_k if role == "A" else access)
    # The buffers hold data (zeros), so what is wrong is the operand alone.
    zeros = [Zero(_box(b.name, (0,) * len(b.shape), b.shape, (None,) * len(b.shape))) for b in module.buffers]
    broken = Module(module.name, module.tensors, module.buffers, Seq((*zeros, For("x", Const(0), Const(1), 1, bad))))
    with pytest.raises(CodegenError, match="must carry K and M|must carry M and K"):
        compile_module(broken)


def test_unsupported_dtypes_are_codegen_errors():
    module = Module("f64", (Tensor("X", (4,), "float64"),), (), Seq(()))
    with pytest.raises(CodegenError, match="float32"):
        compile_module(module)


# --- the IR's fused dimensions, multi-tile DMAs and zero filling ---------------------------------------


def _run(module: Module, arrays: dict[str, np.ndarray], threads: int = 2) -> dict[str, np.ndarray]:
    compile_module(module).run(arrays, threads=threads)
    return arrays


@pytest.mark.parametrize("threads", [1, 2])
def test_dimensions_fused_over_several_axes_split_in_mixed_radix(threads):
    # M = 3 x 5 over two axes of X and Y, N = 2 x 7 over two axes of W and Y.
    s, b, k, n1, n2 = 3, 5, 11, 2, 7
    x_box = _box("X", (0, 0, 0), (s, b, k), ("M", "M", "K"))
    w_box = _box("W", (0, 0, 0), (k, n1, n2), ("K", "N", "N"))
    y_box = _box("Y", (0, 0, 0, 0), (s, b, n1, n2), ("M", "M", "N", "N"))
    tiles = {name: _box(f"{name}_t", (0,) * len(box.starts), box.extents, box.dims)
             for name, box in (("X", x_box), ("W", w_box), ("Y", y_box))}
    body = Seq((
        Dma("get", x_box, tiles["X"], "r"), Dma("get", w_box, tiles["W"], "r"), Dma("get", y_box, tiles["Y"], "r"),
        DmaWait("r"),
        gemm_call(s * b, n1 * n2, k, tiles["X"], tiles["W"], tiles["Y"], vectorize="N"),
        Dma("put", y_box, tiles["Y"], "w"), DmaWait("w"),
    ))
    tensors = (Tensor("X", (s, b, k)), Tensor("W", (k, n1, n2)), Tensor("Y", (s, b, n1, n2), is_output=True))
    buffers = tuple(LocalBuffer(f"{name}_t", box.extents) for name, box in (("X", x_box), ("W", w_box), ("Y", y_box)))
    module = Module("fused", tensors, buffers, body)
    rng = np.random.default_rng(4)
    arrays = {"X": rng.standard_normal((s, b, k), dtype=np.float32),
              "W": rng.standard_normal((k, n1, n2), dtype=np.float32),
              "Y": rng.standard_normal((s, b, n1, n2), dtype=np.float32)}
    expected = (arrays["Y"].reshape(s * b, -1).astype(np.float64)
                + arrays["X"].reshape(s * b, k).astype(np.float64) @ arrays["W"].reshape(k, -1))
    _run(module, arrays, threads)
    assert relative_error(arrays["Y"].reshape(s * b, -1), expected) <= TOLERANCE


@pytest.mark.parametrize("threads", [1, 2])
def test_a_hoisted_dma_moves_several_tiles_and_gemm_picks_one(threads):
    # X[T, m, k] is loaded once into X_all[T, m, k]; the loop over t multiplies tile t: Y[t] += X[t] W.
    t_count, m, n, k = 4, 24, 40, 16
    t = Var("t")
    body = Seq((
        Dma("get", _box("X", (0, 0, 0), (t_count, m, k), (None, "M", "K")),
            _box("X_all", (0, 0, 0), (t_count, m, k), (None, "M", "K")), "x"),
        Dma("get", _box("W", (0, 0), (k, n), "KN"), _box("W_t", (0, 0), (k, n), "KN"), "x"),
        DmaWait("x"),
        For("t", Const(0), Const(t_count), 1, Seq((
            Dma("get", _box("Y", (t, 0, 0), (1, m, n), (None, "M", "N")), _box("Y_t", (0, 0), (m, n), "MN"), "y"),
            DmaWait("y"),
            gemm_call(m, n, k, _box("X_all", (t, 0, 0), (1, m, k), (None, "M", "K")), _box("W_t", (0, 0), (k, n), "KN"),
                 _box("Y_t", (0, 0), (m, n), "MN"), vectorize="N"),
            Dma("put", _box("Y", (t, 0, 0), (1, m, n), (None, "M", "N")), _box("Y_t", (0, 0), (m, n), "MN"), "w"),
            DmaWait("w"),
        ))),
    ))
    module = Module("hoisted", (Tensor("X", (t_count, m, k)), Tensor("W", (k, n)),
                                Tensor("Y", (t_count, m, n), is_output=True)),
                    (LocalBuffer("X_all", (t_count, m, k)), LocalBuffer("W_t", (k, n)), LocalBuffer("Y_t", (m, n))),
                    body)
    rng = np.random.default_rng(5)
    arrays = {"X": rng.standard_normal((t_count, m, k), dtype=np.float32),
              "W": rng.standard_normal((k, n), dtype=np.float32),
              "Y": rng.standard_normal((t_count, m, n), dtype=np.float32)}
    expected = arrays["Y"].astype(np.float64) + arrays["X"].astype(np.float64) @ arrays["W"]
    _run(module, arrays, threads)
    assert relative_error(arrays["Y"], expected) <= TOLERANCE


def test_zero_filled_gets_clip_each_axis_and_zero_the_rest():
    # For i in -3..3: T = X[i - 1 : +4, 2 * i : +5] with zeros outside X; Y[i + 3] = T.
    i = Var("i")
    get = Dma("get", _box("X", (BinOp("-", i, Const(1)), BinOp("*", i, Const(2))), (4, 5), "MN"),
              _box("T", (0, 0), (4, 5), "MN"), "r", zero_fill=True)
    put = Dma("put", _box("Y", (BinOp("+", i, Const(3)), 0, 0), (1, 4, 5), (None, "M", "N")),
              _box("T", (0, 0), (4, 5), "MN"), "w")
    module = Module("halo", (Tensor("X", (6, 7)), Tensor("Y", (7, 4, 5), is_output=True)), (LocalBuffer("T", (4, 5)),),
                    For("i", Const(-3), Const(4), 1, Seq((get, DmaWait("r"), put, DmaWait("w")))))
    x = np.arange(1, 43, dtype=np.float32).reshape(6, 7)
    arrays = _run(module, {"X": x, "Y": np.full((7, 4, 5), -1, np.float32)})
    padded = np.zeros((6 + 20, 7 + 20), np.float32)
    padded[10:16, 10:17] = x
    for value in range(-3, 4):
        rows, columns = value - 1 + 10, 2 * value + 10
        np.testing.assert_array_equal(arrays["Y"][value + 3], padded[rows:rows + 4, columns:columns + 5])


def test_a_zero_filled_get_whose_single_index_axis_is_outside_moves_nothing():
    get = Dma("get", _box("X", (2, 0, 0), (1, 3, 4), (None, "M", "N")), _box("T", (0, 0), (3, 4), "MN"), "r",
              zero_fill=True)
    put = Dma("put", _box("Y", (0, 0), (3, 4), "MN"), _box("T", (0, 0), (3, 4), "MN"), "w")
    module = Module("outside", (Tensor("X", (2, 3, 4)), Tensor("Y", (3, 4), is_output=True)),
                    (LocalBuffer("T", (3, 4)),),
                    Seq((get, DmaWait("r"), put, DmaWait("w"))))
    arrays = _run(module, {"X": np.ones((2, 3, 4), np.float32), "Y": np.full((3, 4), 7, np.float32)})
    np.testing.assert_array_equal(arrays["Y"], np.zeros((3, 4), np.float32))


def test_zero_sets_a_box_of_a_buffer():
    module = Module("zero", (Tensor("X", (3, 4)), Tensor("Y", (3, 4), is_output=True)), (LocalBuffer("T", (3, 4)),),
                    Seq((Dma("get", _box("X", (0, 0), (3, 4), "MN"), _box("T", (0, 0), (3, 4), "MN"), "r"),
                         DmaWait("r"), Zero(_box("T", (1, 1), (2, 2), "MN")),
                         Dma("put", _box("Y", (0, 0), (3, 4), "MN"), _box("T", (0, 0), (3, 4), "MN"), "w"))))
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    arrays = _run(module, {"X": x, "Y": np.zeros((3, 4), np.float32)})
    expected = x.copy()
    expected[1:3, 1:3] = 0
    np.testing.assert_array_equal(arrays["Y"], expected)


def test_a_map_is_vectorized_along_its_contiguous_innermost_dimension():
    """A depthwise conv's multiply-accumulate over [columns x channels] planes, 32 channels innermost:
    the channel loop is vectorized with plain vector loads. (Unrolled whole, it left LLVM to vectorize
    the column loop around it with gathers, at a tenth of the speed.)"""
    kernel = swauto_compile(EXAMPLES / "conv2d_depthwise.sw", {"B": 1, "C": 32, "Ri": 12, "Ci": 12}, target="host",
                            threads=1)
    assert "gather" not in kernel.code and f"<{select().width} x float>" in kernel.code


def test_a_multiply_accumulate_map_runs_one_multiply_add_per_tap():
    """A depthwise conv's `Z += X * Y` is one `llvm.fmuladd` per tap (an FMA where the CPU has one), not a
    multiply and an add; the host model prices it as one operation (`multiply_adds`)."""
    from swauto.backends.host.primitives import multiply_adds

    kernel = swauto_compile(EXAMPLES / "conv2d_depthwise.sw", {"B": 1, "C": 32, "Ri": 12, "Ci": 12}, target="host",
                            threads=1)
    assert "@llvm.fmuladd" in kernel.code and " fmul " not in kernel.code and " fadd " not in kernel.code
    calls = [node for node, _ in walk(kernel.module.body) if isinstance(node, Call)]
    assert calls and all(multiply_adds(call) for call in calls)
    relu = swauto_compile(EXAMPLES / "relu.sw", {"N": 4096}, target="host", threads=1)
    assert not any(multiply_adds(node) for node, _ in walk(relu.module.body) if isinstance(node, Call))


def test_read_only_inputs_and_views_are_read_where_they_are():
    """A call finds each array's first element where NumPy keeps its address (`program._data_offset`) or,
    for other types, through the buffer protocol or NumPy (read-only); a C-contiguous view that starts
    inside a larger array starts at its own element."""
    kernel = swauto_compile(GEMM_SW, {"M": 24, "N": 40, "K": 16}, target="host")
    arrays = gemm_inputs(24, 40, 16, seed=3)
    expected = gemm_reference(arrays)
    product = expected - arrays["C"]
    arrays["A"].flags.writeable = False
    rows = np.zeros((20, 40), np.float32)
    rows[4:] = arrays["B"]
    kernel(A=arrays["A"], B=rows[4:], C=arrays["C"])
    assert relative_error(arrays["C"], expected) <= 1e-5
    arrays["C"][...] = 0.0
    kernel(A=arrays["A"].view(_Subclass), B=rows[4:].view(_Subclass), C=arrays["C"])
    assert relative_error(arrays["C"], product) <= 1e-5


class _Subclass(np.ndarray):
    """An array type of the user's (its address is read through the buffer protocol or NumPy)."""


def test_an_edge_narrower_than_a_vector_runs_in_narrower_vectors():
    """28 columns of 16-lane vectors: one vector of 16, then one of 8 and one of 4, not 12 single lanes
    (the host model prices each as a vector's FMA); right on every register tile calibration may pick."""
    from swauto.backends.host.microkernel import lane_groups

    assert lane_groups(28, 16) == [16, 8, 4] and lane_groups(37, 16) == [16, 16, 4, 1]
    assert lane_groups(7, 8) == [4, 2, 1]
    m, n, k = 13, 28, 24
    module = transposed_gemm_module(m, n, k, tile_k=k, vectorize="N")
    isa = select()
    text = str(generate(module, isa, Knobs(*HOST_MICRO_KERNELS[isa.name][0])))
    for lanes in (lane for lane in (16, 8, 4) if lane <= isa.width):
        assert f"llvm.fma.v{lanes}f32" in text
    arrays = gemm_inputs(m, n, k, seed=5)
    arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    compile_module(module).run(arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE
    # Priced as 3 vectors: within a few percent of 32 columns' 2, where 12 single lanes were 13 slots.
    machine = host_model.machine()
    seconds = {columns: host_model.estimate(transposed_gemm_module(m, columns, k, k, "N"), 1, machine).compute
               for columns in (28, 32)}
    assert seconds[28] < 2 * seconds[32]


def host_assembly(llvm_ir: str) -> str:
    """The machine code LLVM makes of `llvm_ir` for this CPU, as assembly text."""
    import llvmlite.binding as llvm

    from swauto.backends.host import isa as isas
    from swauto.backends.host.jit import _target_machine

    machine = _target_machine(isas.host_cpu()[0], isas.target_features(select()))
    return machine.emit_assembly(llvm.parse_assembly(llvm_ir))


@pytest.mark.parametrize(("m", "n", "knobs"), [(8, 64, Knobs(6, 4)), (9, 80, Knobs(4, 4)), (12, 64, Knobs(6, 4))])
def test_each_register_tile_starts_behind_a_compiler_barrier_and_nothing_spills(m, n, knobs):
    """AVX-512: 8 rows in 6 x 4 tiles run one whole tile and a remainder of 2 in straight-line code (32
    accumulators together), 80 columns in 4 x 4 tiles a column tile of 3 vectors and one of 2; a compiler
    barrier before each register tile keeps LLVM from loading the next tile's accumulators before the last
    one's K loop (it did, and spilled them to the stack). Right on this CPU."""
    module = transposed_gemm_module(m, n, 48, tile_k=48, vectorize="N")
    text = str(generate(module, ISAS["avx512"], knobs))
    assert text.count('asm sideeffect "", "~{memory}"') == len(re.findall(r"^gemm\.k\.header[.\d]*:", text, re.M)) >= 1
    isa = select()
    if isa.name == "avx512":
        program = compile_module(module, knobs=knobs)
        assembly = host_assembly(program.llvm_ir)
        assert not re.search(r"%zmm\d+, -?\d*\(%rsp\)", assembly), "an accumulator spilled to the stack"
    else:
        knobs = default_knobs(isa)
    arrays = gemm_inputs(m, n, 48, seed=6)
    arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    compile_module(module, knobs=knobs).run(arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


@pytest.mark.parametrize(("isa", "m", "n", "knobs"), [
    ("avx2", 8, 8, Knobs(4, 2)), ("avx2", 10, 8, Knobs(2, 5)), ("avx2", 64, 24, Knobs(4, 2)),
    ("avx2", 20, 40, Knobs(4, 3)), ("generic", 5, 8, Knobs(6, 2)), ("generic", 12, 12, Knobs(4, 2))])
def test_register_tiles_of_sixteen_register_isas_keep_their_k_loop_rolled_where_unrolling_spilled(isa, m, n, knobs):
    """AVX2's 16 registers: a column tile of one vector takes 8 - 10 rows (`Knobs.rows_for`), whose K loop,
    unrolled by LLVM, spilled an accumulator on every K step; without FMA (generic), every unrolled tile
    needs its products' registers twice. Those K loops stay rolled (`rolled_k_loop`), a tile that cannot
    hold a product beside its accumulators does not fit, and no register tile or packing copy stores a
    vector register to the stack."""
    import llvmlite.binding as llvm

    from swauto.backends.host import isa as isas
    from swauto.backends.host.jit import _optimise, _target_machine
    from swauto.backends.host.microkernel import rolled_k_loop

    if select().width < ISAS[isa].width:
        pytest.skip(f"this CPU cannot run {isa}")
    avx2, avx512 = ISAS["avx2"], ISAS["avx512"]
    assert rolled_k_loop(8, 1, avx2) and not rolled_k_loop(7, 1, avx2) and not rolled_k_loop(8, 2, avx2)
    assert not rolled_k_loop(16, 1, avx512) and rolled_k_loop(4, 2, ISAS["generic"])
    assert Knobs(4, 3).fits(avx2) and not Knobs(4, 3).fits(ISAS["generic"])
    module = transposed_gemm_module(m, n, 48, tile_k=48, vectorize="N")
    machine = _target_machine(isas.host_cpu()[0], isas.target_features(ISAS[isa]))
    code = llvm.parse_assembly(str(generate(module, ISAS[isa], knobs)))
    code.triple, code.data_layout = machine.triple, str(machine.target_data)
    _optimise(code, machine)
    register = "ymm" if isa == "avx2" else "xmm"
    assert not re.search(rf"mov[ua]ps\s+%{register}\d+, -?\d*\(%rsp\)", machine.emit_assembly(code)), "a spill"
    arrays = gemm_inputs(m, n, 48, seed=7)
    arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    compile_module(module, knobs=knobs, isa=isa).run(arrays)
    assert relative_error(arrays["C"], expected) <= TOLERANCE


def test_broadcast_rows_whose_k_steps_cross_lines_are_prefetched_one_row_per_line():
    """`prefetched_rows`: rows over 3 pixels x 8 images (K steps 8 floats apart) take one prefetch per
    pixel, 1 KB ahead; rows whose K is contiguous or looked up take none."""
    from swauto.backends.host.microkernel import PREFETCH_BYTES, PREFETCH_STEPS, prefetched_rows

    pixels_by_images = [pixel * 256 + image for pixel in range(3) for image in range(8)]
    assert prefetched_rows(pixels_by_images, range(0, 256, 8)) == ([0, 8, 16], PREFETCH_BYTES // 32)
    assert prefetched_rows(list(range(24)), range(0, 24 * 1000, 1000)) == ([0, 16], PREFETCH_STEPS)
    assert prefetched_rows(pixels_by_images, range(32)) is None  # K contiguous
    assert prefetched_rows(pixels_by_images, [0, 8, 16, 100]) is None  # a lookup table
    assert prefetched_rows(pixels_by_images, [0]) is None


@pytest.mark.parametrize(("in_l2", "k_contiguous"), [(False, False), (True, False), (False, True)])
def test_broadcast_rows_read_in_a_tensor_beyond_the_l2_are_prefetched_and_the_gemm_stays_right(in_l2, k_contiguous):
    """C[8, 32] = A[8, K] B[K, 32] on the tensors themselves: A held as AT[K, 8] (K steps 8 floats apart)
    and larger than the L2 is prefetched; within the L2, or with K contiguous (A[8, K]), it is not."""
    from swauto.backends.host.isa import cache_sizes

    m, n = 8, 32
    k = (cache_sizes()[1] // 2 if in_l2 else 2 * cache_sizes()[1]) // (4 * m)
    a = _box("A", (0, 0), (m, k), "MK") if k_contiguous else _box("AT", (0, 0), (k, m), "KM")
    call = gemm_call(m, n, k, a, _box("B", (0, 0), (k, n), "KN"), _box("C", (0, 0), (m, n), "MN"), vectorize="N")
    a_tensor = Tensor("A", (m, k)) if k_contiguous else Tensor("AT", (k, m))
    module = Module("prefetch", (a_tensor, Tensor("B", (k, n)), Tensor("C", (m, n), is_output=True)), (), call)
    program = compile_module(module)
    assert ("call void @llvm.prefetch" in program.llvm_ir) == (not in_l2 and not k_contiguous)
    arrays = gemm_inputs(m, n, k, seed=8)
    expected = gemm_reference(arrays)
    if not k_contiguous:
        arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
    program.run(arrays)
    assert relative_error(arrays["C"], expected) <= 4 * TOLERANCE  # sums of up to 2^17 products


def test_an_output_tile_whose_lanes_are_apart_in_the_tensor_is_copied_not_viewed():
    """NCHW at B = 1 with one output pixel per GEMM: the micro-kernel vectorizes the 64 channels, a plane
    apart in the output. A view of the output would give it single lanes (measured 30 ms); the tile is
    copied in and out instead, and the FMAs are whole vectors (5 ms)."""
    from swauto.reference import reference

    params = {"B": 1, "Ni": 16, "No": 32, "Ri": 6, "Ci": 6, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(EXAMPLES / "conv2d_nchw.sw", params)
    module = lower(op, Candidate((("cCo", 1),), ("cRo", "cCo_outer", "cKr", "cKc"), "M"),
                   local_memory_machine("host"))[-1][1]
    isa = select()
    knobs = Knobs(*HOST_MICRO_KERNELS[isa.name][0])
    gemm = next(node for node, _ in walk(module.body) if isinstance(node, Call) and node.signature.kind == "gemm")
    ignored = frozenset(b.name for b in module.buffers if b.dtype == "float64")
    assert gemm.output.name not in layout.plan(module, knobs, isa.width, ignored, views_allowed=True)[1]
    assert f"llvm.fma.v{min(isa.width, 16)}f32" in str(generate(module, isa, knobs))
    rng = np.random.default_rng(7)
    arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, {name: array.copy() for name, array in arrays.items()})
    compile_module(module).run(arrays)
    assert relative_error(arrays["output"], expected["output"]) <= TOLERANCE


def test_a_broadcast_operand_whose_k_steps_share_l1_sets_is_copied_padded_not_viewed():
    """conv2d at B = 8 with 128 output channels, the output's batch innermost: the micro-kernel vectorizes
    the batch and broadcasts the weight, whose K steps (input channels) are 512 bytes apart in the
    tensor. A view would put every step's line in 8 of the L1's 64 sets (AlexNet conv2: 124 ms, 101 on a
    padded copy); the tile is copied with padded rows instead, and computes the same convolution."""
    params = {"B": 8, "Ni": 16, "No": 128, "Ri": 5, "Ci": 5, "Kr": 3, "Kc": 3, "stride": 1, "pad": 1}
    op = load(EXAMPLES / "conv2d.sw", params)
    candidate = Candidate((("K", 16), ("N", 128), ("cCo", 1), ("cKc", 1), ("cKr", 1), ("cRo", 1)),
                          ("N_outer", "K_outer", "cRo_outer", "cCo_outer", "cKr_outer", "cKc_outer"), "M",
                          (("input", (0, 1, 2, 3)), ("output", (0, 1, 2, 3)), ("weight", (0, 1, 3, 2))))
    module = lower(op, candidate, local_memory_machine("host"))[-1][1]
    gemm = next(node for node, _ in walk(module.body) if isinstance(node, Call) and node.signature.kind == "gemm")
    broadcast = layout.gemm_roles(gemm)["broadcast"][1]
    assert broadcast.name.startswith("weight")
    view = layout._view(module, broadcast.name, module.buffer(broadcast.name).shape, layout._moves(module))
    assert view is not None  # a whole box of the weight each time: a view but for the sets its rows share
    k_step = max(a for a, d in enumerate(broadcast.dims) if d == "K" and broadcast.extents[a] > 1)
    assert view[1].axes[k_step].strides[0] == 128  # the tensor's rows: where a view would read them
    isa = select()
    placed, views = layout.plan(module, Knobs(*HOST_MICRO_KERNELS[isa.name][0]), isa.width, frozenset(),
                                views_allowed=True)
    assert broadcast.name not in views and placed[broadcast.name].axes[k_step].strides[0] % 128 != 0
    rng = np.random.default_rng(3)
    declared = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in op.seed.tensors}
    expected = reference(op, {name: array.copy() for name, array in declared.items()})
    arrays = {t.name: np.ascontiguousarray(declared[t.name].transpose(t.layout or range(len(t.shape))))
              for t in module.tensors}  # the weight in its memory order
    compile_module(module).run(arrays)
    assert relative_error(arrays["output"], expected["output"]) <= TOLERANCE


def _depthwise_taps() -> tuple[BoundOperator, Module]:
    """examples/conv2d_depthwise.sw (B = 2, 32 channels, 9 x 9, stride 1) and a legal candidate's final IR
    with the declared layouts and the kernel taps innermost, around the multiply-accumulate."""
    op = load(EXAMPLES / "conv2d_depthwise.sw", {"B": 2, "C": 32, "Ri": 9, "Ci": 9})
    for candidate, stages in explore(op, local_memory_machine("host")).legal:
        declared = all(axes == tuple(range(len(axes))) for _, axes in candidate.layouts)
        if declared and candidate.order[-2:] == ("kr", "kc"):
            return op, stages[-1][1]
    raise AssertionError("no candidate runs the kernel taps innermost")


def test_a_zeroing_stays_where_the_map_after_it_reads_the_zeroed_array():
    """`zeroed_sum` leaves a zeroing out only where the map after it reads nothing of the zeroed array:
    a map whose input is its own output would read the zeros the left-out zeroing no longer writes."""
    _, module = _depthwise_taps()
    call = next(node for node, _ in walk(module.body) if isinstance(node, Call) and node.signature.kind == "map")
    output = call.operand("Z")
    zero = Zero(output)
    assert zeroed_sum(zero, call) == ((), call)
    reading = replace(call, operands=tuple((role, replace(access, name=output.name) if role == "X" else access)
                                           for role, access in call.operands))
    assert zeroed_sum(zero, reading) is None


def test_a_nest_that_only_accumulates_into_a_map_runs_inside_each_point(empty_cache_dir, monkeypatch):
    """A depthwise convolution's 3 x 3 taps around `macc` form one nest that `accumulated_taps` finds
    (Z does not move with kr and kc); run inside each point, each output element adds the same
    products in the same order, so the result is bit for bit the one of the loops around the map."""
    from swauto.backends.host import primitives as host_primitives

    op, module = _depthwise_taps()
    nests = [host_primitives.accumulated_taps(node) for node, _ in walk(module.body) if isinstance(node, For)]
    outermost = next(nest for nest in nests if nest is not None)  # (`walk` meets the outer loop first)
    assert tuple(loop.var for loop in outermost[0]) == ("kr", "kc")
    rng = np.random.default_rng(5)
    inputs = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in module.tensors}
    results = []
    for limit in (0, host_primitives.MAX_TAPS):  # no nest is small enough, then the default
        monkeypatch.setattr(host_primitives, "MAX_TAPS", limit)
        use_fresh_cache_dir(empty_cache_dir / str(limit), monkeypatch)
        arrays = {name: array.copy() for name, array in inputs.items()}
        compile_module(module).run(arrays, threads=1)
        results.append(arrays["output"])
    assert np.array_equal(results[0], results[1])
    expected = reference(op, inputs)["output"]
    assert relative_error(results[1], expected) <= TOLERANCE


def test_a_map_with_taps_computes_points_in_groups_bit_for_bit(empty_cache_dir, monkeypatch):
    """With its taps inside each point, a depthwise multiply-accumulate computes `grouped_points` points
    of its M dimension together (the rest in a shorter group), its output's accesses scoped apart from
    its inputs' loads, and vectorized: each point adds the same products in the same order as one point
    at a time, so the result is bit for bit the same."""
    from swauto.backends.host import primitives as host_primitives

    op = load(EXAMPLES / "conv2d_depthwise.sw", {"B": 2, "C": 32, "Ri": 9, "Ci": 9})
    group = host_primitives.grouped_points(select().registers)

    def grouped_with_a_rest(module: Module) -> bool:
        return any(isinstance(node, Call) and group < dict(node.sizes)["M"] and dict(node.sizes)["M"] % group
                   for node, _ in walk(module.body))

    module = next(stages[-1][1] for candidate, stages in explore(op, local_memory_machine("host")).legal
                  if candidate.order[-2:] == ("kr", "kc") and grouped_with_a_rest(stages[-1][1]))
    rng = np.random.default_rng(9)
    inputs = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in module.tensors}
    results, codes = [], []
    for points in (1, group):
        monkeypatch.setattr(host_primitives, "grouped_points", lambda registers, points=points: points)
        use_fresh_cache_dir(empty_cache_dir / str(points), monkeypatch)
        arrays = {name: array.copy() for name, array in inputs.items()}
        program = compile_module(module)
        program.run(arrays, threads=1)
        results.append(arrays["output"])
        codes.append(program.code)
    assert codes[0] != codes[1]  # the groups change the code, not the result
    assert "!alias.scope" in program.code and f"<{select().width} x float>" in program.code
    assert np.array_equal(results[0], results[1])
    assert relative_error(results[1], reference(op, inputs)["output"]) <= TOLERANCE


def test_a_nest_whose_output_moves_with_it_is_not_run_inside_the_points():
    """Where the map's output tile moves with the loop (each iteration its own Z) or an input is the
    output's array, the loop stays around the map."""
    from swauto.backends.host.primitives import accumulated_taps

    def tile(name: str, start: Expr) -> Access:
        return Access(name, (start, Const(0)), (1, 16), ("M", "N"))

    def nest(z_start: Expr, x_name: str) -> For:
        call = Call("macc", (("M", Const(1)), ("N", Const(16))),
                    (("X", tile(x_name, Var("k"))), ("Y", tile("w", Const(0))), ("Z", tile("z", z_start))))
        return For("k", Const(0), Const(3), 1, call)

    assert accumulated_taps(nest(Const(0), "x")) is not None
    assert accumulated_taps(nest(Var("k"), "x")) is None
    assert accumulated_taps(nest(Const(0), "z")) is None


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), run=st.integers(2, 300), pitch_lines=st.integers(0, 80), pitch_extra=st.integers(0, 15),
       planes=st.integers(1, 3), sets=st.sampled_from([4, 16, 64]))
def test_lines_per_set_counts_what_a_line_by_line_walk_counts(rows, run, pitch_lines, pitch_extra, planes, sets):
    """`layout.lines_per_set` (rows wrapped around the sets at once) against every line of the block placed
    one by one: blocks of `planes` x `rows` rows of `run` floats, rows any number of floats apart."""
    pitch = max(run, 16 * pitch_lines + pitch_extra)
    # Planes a line beyond their rows; a last axis of 1 has no rows of its own.
    extents, strides = (planes, rows, run, 1), (rows * pitch + 16, pitch, 1, 0)
    count = np.zeros(sets, dtype=int)
    for plane in range(planes):
        for row in range(rows):
            start = 4 * (plane * strides[0] + row * pitch)
            for line in range(start // 64, (start + 4 * run - 1) // 64 + 1):
                count[line % sets] += 1
    assert layout.lines_per_set(extents, strides, sets) == count.max()


def test_boxes_gemms_come_back_to_that_overflow_their_l2_sets_are_copied_not_viewed():
    """GEMM 2048^3 in calls of 512 rows x K = 128 x N = 512: read in place, the broadcast rows (8 KiB apart)
    put 32 lines in each L2 set they use, where an L2 of 16 ways holds 16, and every column tile would read
    them again from L3 (93 - 101 GFLOPS on an Intel Xeon, 123 - 128 copied); so would the C tile, which
    each of the 16 calls loads and stores. Both are copied. Calls of 128 rows (8 lines a set) keep both in
    place, and so do calls narrow enough for one column tile, which read their rows once; a C tile one
    call fills whole is not come back to."""
    isa = select()
    knobs = Knobs(*HOST_MICRO_KERNELS[isa.name][0])

    def views(tiles: dict[str, int], k: int = 2048) -> dict[str, str]:
        text = GEMM_SW.read_text()
        for dim, tile in tiles.items():
            text = text.replace(f"split gemm.{dim} by {{", f"split gemm.{dim} by {{{tile}, ")
        module = lower(load(text, {"M": 2048, "N": 2048, "K": k}),
                       Candidate(tuple(tiles.items()), ("N_outer", "M_outer", "K_outer"), "M"),
                       local_memory_machine("host"))[-1][1]
        return layout.plan(module, knobs, isa.width, frozenset(), True, (2 << 20, 16))[1]

    assert not {"A_tile", "C_tile"} & views({"M": 512, "N": 512, "K": 128}).keys()
    assert views({"M": 128, "N": 512, "K": 128}) == {"A_tile": "A", "C_tile": "C"}
    assert views({"M": 512, "N": knobs.vectors * isa.width, "K": 128})["A_tile"] == "A"
    # (K = 512 whole: the host's local memory, a share of this machine's caches, may not hold K = 2048.)
    assert views({"M": 512, "N": 128, "K": 512}, k=512)["C_tile"] == "C"
