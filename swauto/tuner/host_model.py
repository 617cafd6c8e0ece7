"""The host performance model: flops against the micro-kernel's measured rate plus its cost per
accumulator (loading and storing C around the K loop), packing (DMA) traffic against the bandwidth of
the memory level its data comes from, and the parallel nest's iterations shared by the threads.

Its machine constants come from `calibrate()`, a micro-benchmark of a few seconds (the micro-kernel on
cache-resident panels at a long and a short K, copies sized for L2, L3 and DRAM), run once per machine
and stored with the date in the cache directory (`host_machine.json`); a different CPU measures again.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass
from math import ceil, prod
from pathlib import Path

import numpy as np

from swauto.ir import expr as ex
from swauto.ir.nodes import Dma, For, Gemm, Module
from swauto.ir.visitor import walk

CALIBRATION_FILE = "host_machine.json"
CALIBRATION_VERSION = 5


@dataclass(frozen=True)
class Machine:
    """Measured constants of the host: the micro-kernel's flops per second on one core, its seconds
    per accumulator vector (C loaded and stored once per call) and how many accumulators a register
    tile needs to keep the FMA units busy, copy bandwidth (bytes per second, one core) out of L2, L3
    and DRAM, DRAM's total over all cores, and cache sizes in bytes."""

    cpu: str
    measured: str  # ISO date
    kernel_flops: float
    accumulator_seconds: float
    latency_accumulators: float  # a register tile with fewer accumulators waits on FMA latency
    vector_lanes: int  # float32 lanes of the instruction set the kernels are compiled for
    l2_bandwidth: float
    l3_bandwidth: float
    dram_bandwidth: float
    dram_bandwidth_total: float
    transpose_bandwidth: float  # a copy whose innermost axes differ (packing a transposed operand)
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int


@dataclass(frozen=True)
class HostEstimate:
    """Predicted seconds of one call: `compute` (micro-kernels), `traffic` (packing copies and C tile
    loads), and `seconds`, their wall time on the threads."""

    flops: int
    copy_bytes: int
    compute: float
    traffic: float
    seconds: float


def estimate(module: Module, threads: int, machine: Machine) -> HostEstimate:
    """The predicted time of `module` on `threads` cores of `machine` (see the module docstring).
    Deterministic and cheap: it reads only the IR. Every candidate is priced with the default register
    tile: the tiles the space offers differ by about 1% at the median (`HOST_MICRO_KERNELS`), and the
    measuring tuners choose among them."""
    from swauto.backends.host.parallel import split

    tile = _default_tile()
    phases = split(module)
    transposing = _transposing_buffers(module)
    in_group = set()
    if phases.loops:
        in_group = {id(node) for node, _ in walk(phases.loops[-1].body)}
    shared = max(1, min(threads, phases.iterations)) if phases.loops else 1
    share = ceil(phases.iterations / shared) / phases.iterations if phases.loops else 1.0
    level = _source_bandwidth(module, machine)
    # Compute and traffic out of the caches scale with the threads; DRAM traffic only up to its total bandwidth.
    traffic_share = share
    if level == machine.dram_bandwidth:
        traffic_share = 1.0 / max(1.0, min(shared, machine.dram_bandwidth_total / machine.dram_bandwidth))
    parallel = [0.0, 0.0]
    serial = [0.0, 0.0]
    flops = copy_bytes = 0
    for node, loops in walk(module.body):
        if not isinstance(node, (Dma, Gemm)):
            continue
        trips = _trips(loops)
        bandwidth = machine.transpose_bandwidth if isinstance(node, Dma) and node.buffer.name in transposing else level
        node_flops, node_bytes, compute, traffic = _node_cost(node, machine, bandwidth, tile)
        flops += node_flops * trips
        copy_bytes += node_bytes * trips
        target = parallel if id(node) in in_group else serial
        target[0] += compute * trips
        target[1] += traffic * trips
    seconds = parallel[0] * share + parallel[1] * traffic_share + serial[0] + serial[1]
    return HostEstimate(flops, copy_bytes, parallel[0] + serial[0], parallel[1] + serial[1], seconds)


def _node_cost(node: Dma | Gemm, machine: Machine, source_bandwidth: float,
               tile: tuple[int, int]) -> tuple[int, int, float, float]:
    """(flops, copied bytes, compute seconds, traffic seconds) of one execution of `node`, a GEMM on
    register tiles of `tile` (rows, vectors)."""
    if isinstance(node, Dma):
        size = 4 * prod(node.tensor.extents)
        return 0, size, 0.0, size / source_bandwidth
    from swauto.backends.host.layout import gemm_roles, whole_vectors

    roles = gemm_roles(node)
    sizes = {"M": node.m, "N": node.n, "K": node.k}
    u, v = roles["broadcast"][0], roles["vector"][0]
    rows, vectors = tile
    # Columns left over from whole vectors run one lane per FMA, each costing a vector's time; all of
    # them do when the vector operand's lanes are not contiguous in memory.
    width = machine.vector_lanes
    slots = sizes[v] // width + sizes[v] % width if whole_vectors(node, vectors * width) else sizes[v]
    fma = 2 * width / machine.kernel_flops  # seconds per vector FMA at the full rate
    compute = 0.0
    # Register tiles: whole ones, then the edge tiles with fewer rows or vectors. A K step of a tile
    # costs its FMAs, or the FMA latency when it has too few accumulators to hide it.
    for tile_rows, row_tiles in ((rows, sizes[u] // rows), (sizes[u] % rows, 1)):
        for tile_vectors, column_tiles in ((vectors, slots // vectors), (slots % vectors, 1)):
            accumulators = tile_rows * tile_vectors
            if accumulators and row_tiles and column_tiles:
                step = max(accumulators, machine.latency_accumulators) * fma
                compute += row_tiles * column_tiles * (node.k * step + accumulators * machine.accumulator_seconds)
    return node.flops, 0, compute, 0.0


def _default_tile() -> tuple[int, int]:
    """(rows, vectors) of the default micro-kernel of the instruction set the host compiles for."""
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import default_knobs

    knobs = default_knobs(select())
    return knobs.rows, knobs.vectors


def _transposing_buffers(module: Module) -> set[str]:
    """Buffers the micro-kernel reads as its vector operand, packed with the vectorized dimension
    innermost, whose transfers bring another dimension innermost: their copies transpose."""
    from swauto.backends.host.layout import gemm_roles, innermost_dim

    vectorized = {}
    for node, _ in walk(module.body):
        if isinstance(node, Gemm):
            dim, access = gemm_roles(node)["vector"]
            vectorized[access.name] = dim
    transposing = set()
    for node, _ in walk(module.body):
        if isinstance(node, Dma) and node.buffer.name in vectorized:
            innermost = innermost_dim(node.tensor)
            if innermost is not None and innermost != vectorized[node.buffer.name]:
                transposing.add(node.buffer.name)
    return transposing


def _source_bandwidth(module: Module, machine: Machine) -> float:
    """Bandwidth of the level the tensors live in: all of them fit L2, L3, or only DRAM."""
    footprint = sum(4 * prod(t.shape) for t in module.tensors)
    if footprint <= machine.l2_bytes // 2:
        return machine.l2_bandwidth
    if footprint <= machine.l3_bytes // 2:
        return machine.l3_bandwidth
    return machine.dram_bandwidth


def _trips(loops: tuple[For, ...]) -> int:
    return prod(max(0, -(-ex.evaluate(loop.stop - loop.start, {}) // loop.stride)) for loop in loops)


# --- calibration ----------------------------------------------------------------------------------


def machine(cache_dir: Path | None = None) -> Machine:
    """The calibration of this machine from the cache directory, measured (a few seconds) and stored
    first when missing, outdated or made on another CPU."""
    from swauto.backends.host import cache
    from swauto.backends.host.isa import host_cpu, select, target_features

    folder = cache_dir or cache.cache_dir()
    path = folder / CALIBRATION_FILE
    features = hashlib.sha256(target_features(select()).encode()).hexdigest()[:12]
    cpu = f"{host_cpu()[0]} {select().name} {features}"
    try:
        stored = json.loads(path.read_text())
        if stored.get("version") == CALIBRATION_VERSION and stored["machine"]["cpu"] == cpu:
            return Machine(**stored["machine"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    measured = calibrate(cpu)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": CALIBRATION_VERSION, "machine": asdict(measured)}, indent=2))
    except OSError:
        pass
    return measured


def calibrate(cpu: str) -> Machine:
    """Measure this machine's constants (a few seconds)."""
    from swauto.backends.host.isa import cache_sizes, select

    l1, l2, l3 = cache_sizes()
    return Machine(
        cpu=cpu,
        measured=datetime.date.today().isoformat(),
        **_kernel_rate(),
        vector_lanes=select().width,
        l2_bandwidth=_copy_bandwidth(l2 // 4),
        l3_bandwidth=_copy_bandwidth(min(l3 // 4, 8 << 20)),
        dram_bandwidth=_copy_bandwidth(max(4 * l3, 64 << 20)),
        dram_bandwidth_total=_copy_bandwidth(max(4 * l3, 64 << 20), threads=2),
        transpose_bandwidth=_transpose_bandwidth(min(l2 // 2, 1 << 20)),
        l1_bytes=l1,
        l2_bytes=l2,
        l3_bytes=l3,
    )


def _kernel_rate() -> dict[str, float]:
    """The default micro-kernel on cache-resident packed panels, one core, timed at a long and a short
    K: its flops per second in the K loop and its seconds per accumulator vector outside it (a call
    costs accumulators x (K x FMA time + accumulator time)); then on one row, whose register tiles have
    too few accumulators to hide the FMA latency: how many they would need."""
    from swauto.backends.host import compile_module
    from swauto.backends.host.isa import select

    def seconds_per_call(m: int, k: int) -> float:
        module = kernel_benchmark_module(repeat=400 * (KERNEL_BENCHMARK[0] // m), m=m, k=k)  # same work
        program = compile_module(module)
        program.run({}, threads=1)
        calls = sum(_trips(loops) for node, loops in walk(module.body) if isinstance(node, Gemm))
        return _median_seconds(lambda: program.run({}, threads=1)) / calls

    m, n = KERNEL_BENCHMARK
    width = select().width
    long, short = seconds_per_call(m, 128), seconds_per_call(m, 8)
    per_k = (long - short) / (128 - 8)  # one K step of every accumulator
    fma = per_k / (m * n / width)  # seconds per vector FMA
    _, vectors = _default_tile()
    one_row = seconds_per_call(1, 128) / 128 / (n / width / vectors)  # one K step of a one-row tile
    return {"kernel_flops": 2 * width / fma,
            "accumulator_seconds": max(0.0, short - 8 * per_k) / (m * n / width),
            "latency_accumulators": max(float(vectors), one_row / fma)}


KERNEL_BENCHMARK = (96, 192)  # M, N of the micro-kernel benchmark: whole register tiles of every default


def kernel_benchmark_module(repeat: int = 400, k: int = 128, m: int = KERNEL_BENCHMARK[0]) -> Module:
    """`repeat` GEMMs of `m` x 192 x `k` on local buffers (no copies): the micro-kernel's rate."""
    from swauto.ir.expr import Const
    from swauto.ir.nodes import Access, LocalBuffer

    def box(name: str, extents: tuple[int, int], dims: str) -> Access:
        return Access(name, (Const(0), Const(0)), extents, tuple(dims))

    n = KERNEL_BENCHMARK[1]
    gemm = Gemm(m, n, k, box("A", (m, k), "MK"), box("B", (k, n), "KN"), box("C", (m, n), "MN"), "N")
    return Module("kernel_rate", (), (LocalBuffer("A", (m, k)), LocalBuffer("B", (k, n)), LocalBuffer("C", (m, n))),
                  For("r", Const(0), Const(repeat), 1, gemm))


def _transpose_bandwidth(size: int) -> float:
    """Bytes per second copied from a square array of `size` bytes into its transpose (one thread)."""
    side = int((size // 4) ** 0.5)
    source = np.ones((side, side), np.float32)
    target = np.empty_like(source)
    repeat = max(1, (16 << 20) // size)

    def copy() -> None:
        for _ in range(repeat):
            np.copyto(target, source.T)

    return repeat * source.nbytes / _median_seconds(copy)


def _copy_bandwidth(size: int, threads: int = 1) -> float:
    """Bytes per second copied from one array of `size` bytes to another (per thread, summed)."""
    from concurrent.futures import ThreadPoolExecutor

    sources = [np.ones(size // 4, np.float32) for _ in range(threads)]
    targets = [np.empty_like(source) for source in sources]
    repeat = max(1, (64 << 20) // size)

    def copy(index: int) -> None:
        for _ in range(repeat):
            np.copyto(targets[index], sources[index])

    if threads == 1:
        seconds = _median_seconds(lambda: copy(0))
    else:
        with ThreadPoolExecutor(threads) as pool:
            seconds = _median_seconds(lambda: list(pool.map(copy, range(threads))))
    return threads * repeat * size / seconds


def _median_seconds(function, runs: int = 5) -> float:
    function()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
