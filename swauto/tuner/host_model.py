"""The host performance model: flops against the micro-kernel's measured rate plus its cost per
accumulator (loading and storing C around the K loop), packing (DMA) traffic against the bandwidth of
the memory level its data comes from (a cache line per contiguous block shorter than one; a box the
loops come back to, from the level that holds what moved since), tiles the
backend holds in place (views: `backends/host/layout.plan`) at the measured rate of tiles read and
written in place (a put of output tiles only GEMMs write in place hidden under their compute, up to
it), the tiles only maps, reductions and transforms touch at the measured rate of the backend's own
tiled map, the operands' trips between the caches (C tiles swept out between visits,
vector panels and broadcast rows streamed, from L2 overlapping the FMAs as the calibration's p-norm
does (`overlapped`), from L3 broadcast rows after them, a broadcast
operand of short runs fetched where the innermost loop moves it, a
transfer's runs started anew where the innermost loop around it moves its box off them), and the
parallel nest's iterations shared by the threads, in each segment of an operator of several statements
(each segment shared out also pays the native pool's measured fork and join).

Its machine constants come from `calibrate()`, a micro-benchmark of up to about a minute (the micro-kernel on
cache-resident panels at a long and a short K and streaming panels out of L2 and L3, whole GEMMs with each
register tile the instruction set allows, copies sized for L2, L3 and DRAM, the backend's own transposing
copy, the backend's tiled add at each level, GEMMs whose C tiles restart
their runs or go on along them, the core's peak: an in-register FMA loop, and an almost empty kernel on one
core and on all), run once per machine and stored with the date in the cache directory
(`host_machine.json`); a different CPU measures again, and so does `recalibrate()` (`swauto calibrate`).
Every timing is the best of several short runs taken while the core reads quiet (`tuner/quiet`: on a
virtual machine another tenant's thread shared the core for seconds at a time), and the micro-kernel's
rate is checked against the FMA peak, so another process running during calibration is measured again or
not stored. A stored file that is damaged (not JSON, the wrong shape, a constant that is zero, negative,
NaN, infinite or absurd) is measured again and overwritten, with a `CacheWarning`.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from swauto.ir import expr as ex
from swauto.ir.analysis import executions, trip_count
from swauto.ir.memory import dma_pattern
from swauto.ir.nodes import Access, Alloc, Call, Dma, For, Module, Seq, Stmt, Tensor, Zero, seq
from swauto.ir.visitor import walk
from swauto.tuner.quiet import QUIET_FRACTION, WAIT_SECONDS, QuietCore

if TYPE_CHECKING:
    from swauto.backends.host.knobs import Knobs
    from swauto.backends.host.layout import Layout

_log = logging.getLogger(__name__)
CALIBRATION_FILE = "host_machine.json"
CACHE_LINE_BYTES = 64
CALIBRATION_VERSION = 23  # 6: the FMA peak, best-of-runs timings; 7: register tiles; 8: a parallel call's cost;
# 9: the FMA latency and the loads of a K step, measured on panels in L1; 10: a map's bandwidth on tiles in L1;
# 11: a panel's stream out of L2 and L3 into the micro-kernel, the loads of a K step clear of the FMA latency;
# 12: the micro-kernel's rates timed in interleaved rounds (stored ones were up to 30% low), copies with
# ordinary stores, the L3's reach; 13: what a transfer's run costs where it does not continue the last one's,
# tiles in place (views) at their own measured rate; 14: whether GEMMs' C tiles are views or copies; 15: the
# loads of a K step timed in a one-row register tile (the default tile's split it into latency-bound columns);
# 16: a map's transfers at the rate of the backend's own tiled map (`*_stream_bandwidth`); 17: register tiles
# and C views ranked by medians in turns, the default tiles first only within the tolerance; 18: register tiles
# ranked by their times alone; 19: timings taken while the core reads quiet (`tuner/quiet`), register tiles
# within the tolerance ranked by FMAs per load; 20: a transposing copy timed as the backend makes it (in-register
# transposes), not NumPy's; 21: how a K step's FMAs and its panel stream overlap; 22: register tiles of
# different widths explored; 23: whether tiles of tensors beyond the L3 are views or copies


@dataclass(frozen=True)
class Machine:
    """Measured constants of the host: the micro-kernel's flops per second on one core, its seconds
    per accumulator vector (C loaded and stored once per call) and how many accumulators a register
    tile needs to keep the FMA units busy, copy bandwidth (bytes per second, one core) out of L2, L3
    and DRAM, DRAM's total over all cores, cache sizes in bytes, how much data copies at the L3's rate
    (a shared L3, as a virtual machine's, gives one core less than its size), the core's peak flops per second
    (FMAs on registers only: what percent of peak is measured against), the micro-kernel's register
    tiles (rows, vectors) that ran whole GEMMs fastest here, fastest first: the ones the space explores,
    the time a call shared out to every core takes beyond one on a single core (0 on one core), what
    a transfer's run costs where it does not go on from one of the transfer before (in L3, beyond it), and
    whether GEMMs ran faster with their C tiles in place than copied where a register tile's rows share
    L1 sets (`output_views`).

    Construction guarantees every constant is a finite number in a range some real CPU could have
    (ValueError otherwise), so a damaged calibration never reaches the model as 0, NaN or nonsense."""

    cpu: str
    measured: str  # ISO date
    kernel_flops: float
    accumulator_seconds: float
    latency_accumulators: float  # a register tile with fewer accumulators waits on FMA latency
    load_slots: float  # FMA slots a K step takes per register it loads (a vector or a broadcast element)
    vector_lanes: int  # float32 lanes of the instruction set the kernels are compiled for
    l1_map_bandwidth: float  # operand bytes per second of a vectorized map on tiles in L1
    l2_map_bandwidth: float  # the same on tiles in L2 that do not fit L1
    l2_panel_bandwidth: float  # bytes per second the micro-kernel streams a vector panel in at from L2
    l3_panel_bandwidth: float  # the same from L3
    # How a K step's FMAs (F seconds) and its panel stream (S) overlap: (F^p + S^p)^(1/p) seconds, p this
    # exponent (large: the longer one hides the other; 1: one after the other) (`_panel_bandwidths`)
    overlap_exponent: float
    l2_bandwidth: float
    l3_bandwidth: float
    dram_bandwidth: float
    dram_bandwidth_total: float
    transpose_bandwidth: float  # a copy whose innermost axes differ (packing a transposed operand): ours
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    l3_reach: int  # bytes of data (a copy's source and target together) that stay at the L3's rate
    peak_flops: float  # one core, in-register FMAs of the instruction set's widest vectors
    register_tiles: tuple[tuple[int, int], ...]
    parallel_call_seconds: float  # what sharing one call out to every core adds (the pool's fork and join)
    # What a transfer's run (its box's elements contiguous in the tensor) costs where it does not continue a
    # run of the execution before, the tensors in L3 / beyond the L3's reach (`_restarted_runs`)
    l3_restart_seconds: float
    dram_restart_seconds: float
    # Bytes per second a tile read and written in place (a view: no copy) moves, the tensors in L2, L3, beyond
    l2_view_bandwidth: float
    l3_view_bandwidth: float
    dram_view_bandwidth: float
    # Bytes per second the transfers of a map's tiles (gets and puts, or views where the tensors are
    # cache-resident) move, the tensors in L2, L3, beyond (`_stream_rates`)
    l2_stream_bandwidth: float
    l3_stream_bandwidth: float
    dram_stream_bandwidth: float
    output_views: bool  # GEMMs read and write C tiles whose rows share L1 sets in place: faster than copies here
    dram_views: bool  # tiles of tensors beyond the L3 in place: faster than copies here

    def knobs(self, micro_kernel: tuple[int, int] | None) -> Knobs:
        """What the host backend compiles a candidate with here: its register tile (`micro_kernel`; None:
        the instruction set's default) and its GEMMs' C tiles in place or copied, whichever calibration
        measured faster (`output_views`), and tiles of tensors beyond the L3 in place or copied (`dram_views`)."""
        from swauto.backends.host.isa import select
        from swauto.backends.host.knobs import Knobs, default_knobs

        tile = default_knobs(select()) if micro_kernel is None else Knobs(*micro_kernel)
        return replace(tile, output_views=self.output_views, dram_views=self.dram_views)

    def __post_init__(self) -> None:
        for name in ("cpu", "measured"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} is not a string")
        for name in ("output_views", "dram_views"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} = {getattr(self, name)!r} is not true or false")
        # Stored as JSON lists; held as tuples, each a (rows, vectors) pair of positive integers.
        tiles = self.register_tiles
        if not isinstance(tiles, list | tuple) or not tiles or not all(
                isinstance(tile, list | tuple) and len(tile) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 64 for n in tile)
                for tile in tiles):
            raise ValueError(f"register_tiles = {tiles!r} is not a list of (rows, vectors) pairs")
        object.__setattr__(self, "register_tiles", tuple(tuple(tile) for tile in tiles))
        for name, (low, high) in _PLAUSIBLE.items():
            value = getattr(self, name)
            # bool is an int, and a string or None would only fail later, inside the model
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"{name} = {value!r} is outside [{low:g}, {high:g}]")


# Ranges no real CPU core leaves (the comparisons also reject NaN): 0.1 GFLOPS to 10 TFLOPS per core, copies
# at 10 MB/s to 10 TB/s, caches of 1 KiB to 1 TiB.
_FLOPS, _BANDWIDTH, _BYTES = (1e8, 1e13), (1e7, 1e13), (1 << 10, 1 << 40)
_PLAUSIBLE: dict[str, tuple[float, float]] = {
    "kernel_flops": _FLOPS, "peak_flops": _FLOPS, "accumulator_seconds": (0.0, 1e-5),
    "latency_accumulators": (1.0, 256.0), "load_slots": (0.01, 64.0), "vector_lanes": (1, 64),
    "l1_map_bandwidth": _BANDWIDTH, "l2_map_bandwidth": _BANDWIDTH,
    "l2_panel_bandwidth": _BANDWIDTH, "l3_panel_bandwidth": _BANDWIDTH, "overlap_exponent": (1.0, 64.0),
    "l2_bandwidth": _BANDWIDTH, "l3_bandwidth": _BANDWIDTH, "dram_bandwidth": _BANDWIDTH,
    "dram_bandwidth_total": _BANDWIDTH, "transpose_bandwidth": _BANDWIDTH,
    "l1_bytes": _BYTES, "l2_bytes": _BYTES, "l3_bytes": _BYTES, "l3_reach": _BYTES,
    "parallel_call_seconds": (0.0, 1e-2), "l3_restart_seconds": (0.0, 1e-5), "dram_restart_seconds": (0.0, 1e-5),
    "l2_view_bandwidth": _BANDWIDTH, "l3_view_bandwidth": _BANDWIDTH, "dram_view_bandwidth": _BANDWIDTH,
    "l2_stream_bandwidth": _BANDWIDTH, "l3_stream_bandwidth": _BANDWIDTH, "dram_stream_bandwidth": _BANDWIDTH,
}


@dataclass(frozen=True)
class HostEstimate:
    """Predicted seconds of one call: `compute` (micro-kernels), `traffic` (packing copies and C tile
    loads), and `seconds`, their wall time on the threads; `copies`: the copies one call makes."""

    flops: int
    copy_bytes: int
    compute: float
    traffic: float
    seconds: float
    copies: int = 0


def estimate(module: Module, threads: int, machine: Machine, peeled: Mapping[str, float] | None = None,
             verify: bool = True, ordered: bool = True, tile: tuple[int, int] | None = None) -> HostEstimate:
    """The predicted time of `module` on `threads` cores of `machine` (see the module docstring).
    Deterministic and cheap: it reads only the IR. `tile` is the register tile its GEMMs run in (a
    candidate's micro-kernel; by default the calibration's first, in which sketches are priced: the
    tiles differ by a few percent on most GEMMs, `Machine.register_tiles`, but a GEMM of 24 columns
    is three vectors, which the 4 x 3 tile covers at once and the 6 x 2 in a tile and an edge).
    `peeled`, for a sketch (`swauto.tuner.sketch`: every tile whole, its price multiplied by its mean
    work per tile), maps the loops whose last tile the real IR runs in a copy of the loop's body after
    the loop to that tile's work over a whole one's: the parallel group is looked for as in the lowered
    nest (`parallel.segments` is told which loops are peeled), the last iteration of the outermost runs
    on the calling thread alongside the others' shares (as a kernel's peeled last tile does where
    nothing it touches meets them: `parallel.Phases.alongside`), and that of a loop around the group on
    one thread. Without `verify` (a sketch: an estimate's input, not a program) the thread phases are
    taken as the IR verifier would agree (`parallel.segments`). Without `ordered`, what depends on which
    loop is innermost is priced as in the cheapest order: no fetch of a broadcast operand
    (`_fetched_broadcast`), C tiles revisited as if no loop swept others in between
    (`_revisited_accumulators`), no transfer's runs started anew (`_restarted_runs`): a bound over every
    order of a nest's loops."""
    from swauto.backends.host.codegen import buffer_layouts
    from swauto.backends.host.isa import l1_ways, l2_ways
    from swauto.backends.host.layout import written_in_place
    from swauto.backends.host.parallel import segments
    from swauto.backends.host.primitives import taps_around
    from swauto.backends.host.program import split_range

    peeled = peeled or {}

    tile = tile or machine.register_tiles[0]
    # Buffers the backend holds as views of their tensors (`backends/host/codegen.buffer_layouts`): their
    # transfers copy nothing, the micro-kernel reads and writes their bytes where they are, at the
    # measured rate of tiles in place. Views are made only where the tensors are cache-resident or
    # calibration measured them faster beyond the L3 (`dram_views`): elsewhere the plan is not asked for
    # (it is most of an estimate's time).
    l2 = (machine.l2_bytes, l2_ways())
    placed, views = buffer_layouts(module, machine.knobs(tile), machine.vector_lanes, machine.l3_bytes, l2,
                                   (machine.l1_bytes, l1_ways())) \
        if _in_place_allowed(module, machine) else ({}, {})
    # Buffers of a constant's tiles arranged once (`backends/host/prepack`): their gets copy nothing either,
    # and the micro-kernel streams each tile in from where the arrays live, as it streams a panel.
    packed = _prepacked(module, views)
    nodes = [(node, loops) for node, loops in walk(module.body) if isinstance(node, Dma | Call)]
    # Views no transfer fills: output tiles the calls write in place, their put a mere pointer move. Not
    # measured apart: each is priced as the copy out it replaces (its stores move the lines the copy
    # would), less what of it hides under the compute of the GEMMs that write it where they alone do
    # (`_drained_in_place`).
    read_views = views.keys() - written_in_place(module.body, views) if views else set()
    # Per tile drained so, the compute of its writers not yet set against a put of it (one thread's seconds).
    writers = dict.fromkeys(_drained_in_place(module.body, views.keys() - read_views), 0.0)
    transposing = _transposing_buffers(nodes)
    # Tiles only maps, reductions and transforms read and write: their transfers stream at a map's rate.
    gemm_tiles = {access.name for node, _ in nodes if isinstance(node, Call) and node.signature.kind == "gemm"
                  for _, access in node.operands}
    footprint = _footprint(module)
    level = _level_bandwidth(footprint, machine)
    view_bandwidth = _view_bandwidth(footprint, machine)
    rows_in_place = _rows_in_place(nodes, views)
    streamed = rows_in_place | packed  # tiles the micro-kernel streams in where they are
    stream_bandwidth = _stream_bandwidth(footprint, machine)
    restart = _restart_seconds(footprint, machine) if ordered else 0.0
    # Per node of a parallel group, its segment's (compute share, traffic share); the others run on one
    # thread. On one thread, where the parallel phases would start changes nothing: they are not looked for.
    shares: dict[int, tuple[float, float]] = {}
    forks = 0  # segments shared out: each wakes and joins the threads once per call
    alongside: _Alongside | None = None  # the last segment's, where its 'after' runs alongside its threads
    for phases in segments(module, verify, peeled) if threads > 1 else ():
        if not phases.loops:
            continue
        group = phases.loops  # as lowering leaves it: `segments` is told which loops it peels
        trips = [trip_count(loop) for loop in group]
        iterations = prod(trips)
        # The outermost loop's last tile (`apart` iterations of the group, each `last` of a whole one's work):
        # a sketch's, which it prices as if run alongside the other threads' shares, as a real kernel's
        # peeled last tile is where nothing it touches meets them (`Phases.alongside`).
        first = group[0].var
        apart, last = (iterations // trips[0], peeled[first]) if first in peeled else (0, 0.0)
        head = phases.head if phases.head is not None else round(apart * last)
        ranges = split_range(iterations - apart, threads, head)
        shared = len(ranges)
        own, *others = [hi - lo for lo, hi in ranges]
        if phases.alongside:  # the other threads' path; the calling thread's is joined below
            share = max(others, default=0) / iterations
        else:  # of the time of whole tiles on one thread: a sketch's price is multiplied by its mean work per tile
            share = max([own + apart * last, *others]) / (iterations - apart + apart * last)
        # A loop around the group with a shorter last tile runs the group's copy there on one thread.
        for loop in phases.around:
            if loop.var in peeled:
                whole, last = trip_count(loop) - 1, peeled[loop.var]
                share = (whole * share + last) / (whole + last)
        # Compute and traffic out of the caches scale with the threads; DRAM traffic only up to its total
        # bandwidth.
        traffic_share = share
        joint = 1.0 / shared  # of all the segment's traffic, what each thread's path takes when all move it
        if level == machine.dram_bandwidth:
            traffic_share = joint = 1.0 / max(1.0, min(shared, machine.dram_bandwidth_total / machine.dram_bandwidth))
        grouped = {id(node) for node, _ in walk(group[-1].body)}
        shares.update(dict.fromkeys(grouped, (share, traffic_share)))
        if phases.alongside:
            alongside = _Alongside(own / iterations, grouped,
                                   {id(node) for stmt in phases.after for node, _ in walk(stmt)}, joint)
        forks += shared > 1
    total_compute = total_traffic = seconds = 0.0
    # With 'after' alongside: the paths it joins (above), and the traffic of both.
    others_path = group_alone = after_alone = joint_traffic = 0.0
    flops = copy_bytes = copies = 0
    shapes = {array.name: array.shape for array in (*module.tensors, *module.buffers)}
    for node, loops in nodes:
        # A call guarded against tiles of padding (`guard_padding`) runs only where its guards hold.
        trips = executions(loops, node.runs_if) if isinstance(node, Call) else _trips(loops)
        bandwidth = level
        if isinstance(node, Dma):
            # A transposing copy, measured on tiles in L2, moves no faster than a plain copy out of where the
            # tensors live.
            copied = min(machine.transpose_bandwidth, level) if node.buffer.name in transposing else level
            # A prepacked tile streams in no slower than a copy of it would read the same bytes (on a
            # calibration whose panel rate measured below its copy rate, it was priced above its copy).
            bandwidth = stream_bandwidth if node.buffer.name not in gemm_tiles else \
                max(_panel_bandwidth(footprint, machine), copied) if node.buffer.name in packed else \
                _panel_bandwidth(footprint, machine) if node.buffer.name in streamed else \
                view_bandwidth if node.buffer.name in read_views else copied
        taps = taps_around(node, loops) if isinstance(node, Call) else 1
        crowded = isinstance(node, Call) and node.signature.kind == "gemm" \
            and _crowds_l2_sets(node, placed, views, l2, machine, tile)
        node_flops, node_bytes, compute, traffic = _node_cost(node, machine, bandwidth, tile, shapes, taps,
                                                              _cycled_panels(node, loops), crowded)
        if isinstance(node, Dma) and bandwidth == level:  # a plain copy: what comes back may come from nearer
            traffic *= _revisited_share(node, loops, machine, level)
        if isinstance(node, Call) and node.signature.kind == "map" and restart:
            traffic += _view_runs(node, views, shapes) / taps * restart
        if isinstance(node, Call) and node.signature.kind == "gemm":
            traffic += _revisited_accumulators(node, loops, machine, ordered, crowded and node.output.name in views)
            if ordered:
                traffic += _fetched_broadcast(node, loops, machine, module)
            if node.output.name in writers:
                writers[node.output.name] += compute * trips
        if isinstance(node, Dma):
            # A put of a tile the calls' stores wrote in place: its bytes, not its runs' starts.
            if node.buffer.name in writers and trips:
                hidden = min(traffic * trips, writers[node.buffer.name])
                writers[node.buffer.name] -= hidden
                traffic -= hidden / trips
            if restart:
                traffic += _restarted_runs(node.tensor, shapes[node.tensor.name], loops) * restart
            if node.buffer.name in views or node.buffer.name in packed:
                node_bytes = 0
            else:
                copies += trips
                # A map's buffer beyond the L2 level: the copy writes it out of the L2 and the calls read it
                # back from beyond, as `hoist_dma.placement_cost` weighs it (a GEMM's panels are priced where
                # they stream from: `_node_cost`). MobileNetV2 block1.1.depthwise at B = 1: its whole padded
                # input in one copy (1.9 MB) was priced below 10 x 16-pixel tiles of it, and ran 10 - 21% slower.
                if node.buffer.name not in gemm_tiles and _level(4 * prod(shapes[node.buffer.name]), machine) != "l2":
                    traffic *= 2
        flops += node_flops * trips
        copy_bytes += node_bytes * trips
        total_compute += compute * trips
        total_traffic += traffic * trips
        compute_share, traffic_share = shares.get(id(node), (1.0, 1.0))
        node_seconds = (compute * compute_share + traffic * traffic_share) * trips
        if alongside is not None and id(node) in alongside.group:
            others_path += node_seconds
            group_alone += (compute + traffic) * trips
            joint_traffic += traffic * trips
        elif alongside is not None and id(node) in alongside.after:
            after_alone += (compute + traffic) * trips
            joint_traffic += traffic * trips
        else:
            seconds += node_seconds
    if alongside is not None:
        seconds += max(others_path, alongside.own * group_alone + after_alone, joint_traffic * alongside.joint)
    seconds += forks * machine.parallel_call_seconds
    return HostEstimate(flops, copy_bytes, total_compute, total_traffic, seconds, copies)


@dataclass(frozen=True)
class _Alongside:
    """Where a kernel's 'after' runs on the calling thread alongside the last segment's other threads
    (`parallel.Phases.alongside`): that thread's share of the group (of the group's time on one thread),
    the group's and the after's nodes (by id), priced apart and joined at the end, and the share of
    their traffic each thread's path takes when every thread moves it (out of DRAM, only up to its total
    bandwidth)."""

    own: float
    group: set[int]
    after: set[int]
    joint: float


def least_seconds(nest: Module, threads: int, machine: Machine) -> Callable[[int], float]:
    """No module that computes as `nest` does (no transfer in it) and moves `moved` bytes is priced
    below `least(moved)` by `estimate`: the nest's compute (shared by the threads, or on one core where
    that is less: a module's transfers may leave it no loop to share, and sharing one costs the fork and
    join) plus those bytes at the fastest rate a transfer of its tensors gets (a copy, one the loops bring
    back soon enough to find it in the L2 (`_revisited_share`), a transposing one, or, where tiles may be
    held in place (`_in_place_allowed`), a tile in place or broadcast rows in place: `_rows_in_place`; a
    constant's prepacked tile streams in at that rate anywhere), shared by every thread; where output tiles may be
    written in place, the larger of the two, not their sum (their puts hide under the compute)."""
    compute = min(estimate(nest, count, machine, verify=False, ordered=False).seconds  # as sketches
                  for count in {1, threads})
    footprint = _footprint(nest)
    rates = [_level_bandwidth(footprint, machine), machine.l2_bandwidth, machine.transpose_bandwidth,
             _stream_bandwidth(footprint, machine)]
    resident = _in_place_allowed(nest, machine)
    if resident:  # a tile in place
        rates.append(_view_bandwidth(footprint, machine))
    if resident or any(tensor.is_constant for tensor in nest.tensors):  # rows in place, a prepacked tile
        rates.append(_panel_bandwidth(footprint, machine))
    bandwidth = max(rates) * threads
    # Where a put of output tiles written in place may hide under the calls' compute (`_drained_in_place`),
    # a module pays at least the larger of the two: its compute, C, plus its other traffic, T, plus what of
    # its puts' traffic, P, the compute does not hide, is at least T + max(C, P).
    # (Whatever `output_views` says: it decides only C tiles whose rows share L1 sets.)
    if resident and any(isinstance(node, Call) and node.signature.kind == "gemm" for node, _ in walk(nest.body)):
        return lambda moved: max(compute, moved / bandwidth)
    return lambda moved: compute + moved / bandwidth


def call_seconds(call: Call, machine: Machine) -> float:
    """One primitive call on tiles in the caches, with the fastest register tile: its compute and, for
    a map or reduction, its operands' traffic (`_node_cost`)."""
    _, _, compute, traffic = _node_cost(call, machine, machine.l2_bandwidth, machine.register_tiles[0])
    return compute + traffic


def _cycled_panels(node: Dma | Call, loops: tuple[For, ...]) -> int:
    """How many panels of a GEMM's vector operand take turns in the cache between two calls on the
    same one: the trips of the loops that move the panel (a convolution's kernel taps, each with its
    own weight panel) among the innermost band around the call, the loops nested with nothing else
    between them. Counting the band whole keeps the figure the same in every order of its loops, as
    the sketches' signatures assume (`Sketcher`). (A peeled copy beside a loop ends the band in the
    real IR, not in its sketch, which has none.) Where every loop of the band moves the panel, the
    runs of loops outside it that all move it too count as well, up to the first that holds one that
    does not (the loop whose iterations come back to the panel): GEMM 1024^3 in calls of 32 x 32 x 256
    under M > N > K, N and K outside the band (C's transfers sit between them), came back to each 32 KB
    panel only after the whole packed operand (4 MB, twice the L2) had passed, and priced it from the
    L2; now priced 13.78 ms, not
    13.37, the model picks M tiles of 64 (half the panels' reads), which ran 1.16x as fast on one
    thread, in turns (on two, N tiles of 128 under N > M > K: 1.19x). (Never below the band's count:
    the class bounds, `least_seconds`, price nests without transfers, whose bands hold more loops.)"""
    if not isinstance(node, Call) or node.signature.kind != "gemm" or not loops:
        return 1
    from swauto.backends.host.layout import gemm_roles

    moving = set().union(*(ex.free_vars(start) for start in gemm_roles(node)["vector"][1].starts))
    band = [loops[-1]]
    for outer, inner in zip(reversed(loops[:-1]), reversed(loops[1:]), strict=True):
        body = outer.body
        while isinstance(body, Seq) and len(body.stmts) == 1:
            body = body.stmts[0]
        if body is not inner:
            break
        band.append(outer)
    cycled = prod(trip_count(loop) for loop in band if loop.var in moving)
    if any(loop.var not in moving for loop in band):
        return cycled
    # Every loop of the band moves the panel: the calls come back to it only in an iteration of a loop
    # further out, after the runs of loops between cycled theirs.
    for run in _runs(loops[:len(loops) - len(band)]):
        if any(member.var not in moving for member in run):
            break
        cycled *= prod(trip_count(member) for member in run)
    return cycled


def _runs(loops: Sequence[For]) -> Iterator[list[For]]:
    """`loops` (outermost first) in runs, innermost first: loops nested with no transfer between them,
    which a sketch's signature keeps as sets (`swauto.tuner.sketch`), each run innermost first."""
    run: list[For] = []
    for index in range(len(loops) - 1, -1, -1):
        run.append(loops[index])
        if index and not _holds_transfer(loops[index - 1], loops[index]):
            continue  # the run goes on outwards
        yield run
        run = []


def _revisited_accumulators(gemm: Call, loops: tuple[For, ...], machine: Machine, ordered: bool = True,
                            crowded: bool = False) -> float:
    """Seconds one execution of `gemm` spends bringing its C tile back (loaded before the K loop, stored
    after it, around the FMAs, not under them) from the cache level it fell to since the last execution
    on the same tile. A loop that does not move C revisits the tile every iteration, after the loops
    inside it swept that many C tiles. Loops run together where no transfer sits between them (the
    *runs* a sketch's signature keeps as sets: `swauto.tuner.sketch`), and within its run such a loop
    is taken innermost, so that the price is the same in every order of a run; from the innermost run
    that holds one outwards. But `ordered`, the innermost loop (which the signature names) sweeps
    first where it moves C (YOLOv2 conv1 at B = 1, a C block of 16 image rows, 852 KB: with the kernel
    columns' loop outside the image columns', measured 6.6 - 7.2 ms, 3.7 - 5.8 with it inside, in separate
    runs; priced alike without this). Within half the L1 the tile's trip is the micro-kernel's own cost
    (`accumulator_seconds`); beyond, it moves at the copy bandwidth of the level the sweep fits (GEMM
    1024^3 in C tiles of 32 x 64, K tiles of 128: measured 120 GFLOPS with the K loop outside the
    others, 151 with it innermost, where each tile stays in L1; priced alike without this). A tile in place
    whose call `crowded` its L2 sets (`_crowds_l2_sets`) comes back from the L3."""
    c = gemm.operand("C")
    moving = set().union(*(ex.free_vars(start) for start in c.starts))
    swept = tile = 4 * prod(c.extents)
    innermost = _innermost_loop(loops) if ordered else None
    for run in _runs(loops):
        if any(member.var not in moving for member in run):
            if innermost is not None and any(member is innermost for member in run) and innermost.var in moving:
                swept *= trip_count(innermost)
            break
        swept *= prod(trip_count(member) for member in run)
    else:
        return 0.0  # every loop moves C: each tile is visited once
    if swept <= machine.l1_bytes // 2:
        return 0.0
    bandwidth = _level_bandwidth(swept, machine)
    return tile / (min(bandwidth, machine.l3_bandwidth) if crowded else bandwidth)


def _crowds_l2_sets(gemm: Call, placed: Mapping[str, Layout], views: Mapping[str, str], l2: tuple[int, int],
                    machine: Machine, tile: tuple[int, int]) -> bool:
    """Whether a GEMM's boxes the call comes back to put more lines in one set of an L2 of `l2` (bytes,
    ways), together, than it has ways (`backends/host/layout.lines_per_set`, each box at its worst set, as
    if those coincided): its broadcast rows read in place (each column tile reads them again), its C tile
    in place (the next call loads it), and its vector panel (packed: spread over every set), where spread
    over every set they would fit. Each alone may fit (`layout` copies a box that does not). GEMM 2048^3
    on one thread on an Intel Xeon (2 MiB L2 of 16 ways), calls of 256 x 512 x 256, rows and C tile 16
    lines a set each: 123 - 125 GFLOPS with the tensors' rows 8 KiB apart, 131 - 142 with them 8256 bytes
    apart; calls of 32 x 512 x 512 (2 lines a set) 142 - 149 and 136 - 150."""
    if not views:
        return False
    from swauto.backends.host.layout import box_lines_per_set, gemm_roles, rereads_rows

    set_bytes = l2[0] // l2[1]  # what fills one line of every set
    roles = gemm_roles(gemm)
    dim, _ = roles["vector"]
    worst = even = -(-4 * dict(gemm.sizes)["K"] * dict(gemm.sizes)[dim] // set_bytes)  # the panel, spread
    boxes = [roles["C"][1]] + ([roles["broadcast"][1]] if rereads_rows(gemm, tile[1], machine.vector_lanes) else [])
    for access in boxes:
        if access.name in views:
            worst += box_lines_per_set(access, placed[access.name], l2)
            even += -(-4 * prod(access.bounding_box().spans()) // set_bytes)
    # Only where the sets, not the size, are what overflows: boxes beyond the L2 are priced from where they fit.
    return worst > l2[1] >= even


def _revisited_share(dma: Dma, loops: tuple[For, ...], machine: Machine, level: float) -> float:
    """What one execution of `dma`, a copy priced at `level` (the rate of the level the module's tensors
    fit), costs on average over its executions, as a share of that price: a box the loops come back to
    moves at the rate of the level that holds what every copy of the module moved since the last visit.
    Each loop around the copy that does not move its box (innermost first) brings every box back once
    per iteration after its first; what moved in between is what the copies in that loop's body move in
    one of its iterations. GEMM 2048^3 on one thread, C tiles of 64 x 512, K tiles of 512: with the K
    loop outermost each C tile comes back after the whole C (16 MB) and both operands' K slices moved,
    with the K loop inside the column tiles' after 13 MB, within the L3's reach. Priced alike at the
    module's level (DRAM) before, and the model took the first: 266 ms against 248 in one comparison
    in turns, a tie within 3% in another (226 - 243 against 229 - 235); now the second is priced 4 ms
    (2%) below the first, and both 5 and 9 ms nearer what they measured (predicted above it)."""
    moving = set().union(*(ex.free_vars(start) for start in dma.tensor.starts))
    returning = [loop for loop in loops if loop.var not in moving and trip_count(loop) > 1]
    if not returning:
        return 1.0
    executions_total = _trips(loops)
    distinct = executions_total // _trips(tuple(returning))
    saved = 0.0  # what the revisits save on the price at `level`, in executions at that price
    outer = 1  # the iterations of the returning loops outside this one
    for loop in returning:
        moved = sum(4 * prod(node.tensor.extents) * _trips(inner) for node, inner in walk(loop.body)
                    if isinstance(node, Dma))
        # Never slower than `level`: the module's tensors stay there however often they move.
        back = max(level, _level_bandwidth(moved, machine))
        saved += distinct * (trip_count(loop) - 1) * outer * (1 - level / back)
        outer *= trip_count(loop)
    return 1.0 - saved / executions_total


def _innermost_loop(loops: tuple[For, ...]) -> For | None:
    """The innermost of `loops` that runs more than once (the one whose iterations follow each other)."""
    return next((loop for loop in reversed(loops) if trip_count(loop) > 1), None)


def _fetched_broadcast(gemm: Call, loops: tuple[For, ...], machine: Machine, module: Module) -> float:
    """Seconds one execution of `gemm` spends fetching its broadcast operand's lines from where its array
    lives, where the operand is runs shorter than a cache line (a few elements apart, no stream to
    prefetch: a first layer's window of 3 channels), the array does not fit half the L1 and the
    innermost loop around the call (`_innermost_loop`) moves the operand off the box the iteration before
    read: the share of the box it moves, a line per run, at the copy bandwidth of the level the array
    fits (`_level_bandwidth`). YOLOv2 conv1 at B = 1, 16 image rows of one column per call out of a
    6.2 MB input window: 11.4 ms with the rows loop innermost, 2.6 with the columns loop innermost (the
    next call reads two thirds of the same lines); VGG16 conv1_1, a 1.8 MB window: 3.0 - 4.1 ms against
    1.4 - 1.5; priced alike without this."""
    from swauto.backends.host.layout import gemm_roles

    loop = _innermost_loop(loops)
    access = gemm_roles(gemm)["broadcast"][1]
    array = next((a for a in (*module.tensors, *module.buffers) if a.name == access.name), None)
    if loop is None or array is None or 4 * prod(array.shape) <= machine.l1_bytes // 2:
        return 0.0
    moved = 0.0
    for start, extent in zip(access.starts, access.extents, strict=True):
        form = ex.linear_form(start)
        shift = abs(form[0].get(loop.var, 0)) * loop.stride if form is not None else extent
        moved = max(moved, min(1.0, shift / extent))
    if not moved:
        return 0.0
    # Runs: the box's elements contiguous in memory (the array's axes in memory order).
    order = (isinstance(array, Tensor) and array.layout) or tuple(range(len(array.shape)))
    run = 1
    for axis in reversed(order):
        run *= access.extents[axis]
        if access.extents[axis] != array.shape[axis]:
            break
    if 4 * run >= CACHE_LINE_BYTES:
        return 0.0  # rows of whole lines stream in (the panel's rate in `_node_cost`)
    lines = prod(access.extents) // run
    return moved * lines * CACHE_LINE_BYTES / _level_bandwidth(4 * prod(array.shape), machine)


def _view_runs(call: Call, views: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]]) -> int:
    """The runs (`_box_runs`, in the tensors) a map reads and writes in place, in its operands that are
    views of tensors (`views`: buffer to tensor). Each starts anew: a short run's pieces lie apart, and no
    prefetcher follows them from one call to the next. MobileNetV2 block4.1.depthwise at B = 8 on one
    thread (its whole input one view in L3, channels innermost), in turns: 32 channels per call, runs of
    128 B 2304 B apart, 2.0 - 3.6 ms; 128 channels 1.6 - 1.8; all 576 1.2 - 1.3; priced 0.66, 0.90 and
    0.87 without this (the pick with it, 576 channels, ran 0.54x the former's time). Not for Winograd's
    transforms, whose windows overlap and follow each other along the rows: priced so, ResNet-50
    res2_3x3 at B = 1 left F(4x4, 3x3) for a direct convolution that ran 1.27x as long."""
    return sum(_box_runs(access.bounding_box(), shapes[views[access.name]]) for _, access in call.operands
               if access.name in views)  # a view's box walks its tensor's axes, one to one


def _box_runs(box: Access, shape: tuple[int, ...]) -> int:
    """How many runs of contiguous elements `box` is in its row-major array of `shape`."""
    extents = box.spans()
    axis = _run_axis(extents, shape)
    return 1 if axis is None else prod(extents[:axis])


def _run_axis(extents: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The axis a box of `extents` in a row-major array of `shape` runs along: the innermost it does not
    cover whole (the axes inside it are whole); None for the whole array."""
    return next((a for a in reversed(range(len(extents))) if extents[a] != shape[a]), None)


def _restarted_runs(box: Access, shape: tuple[int, ...], loops: tuple[For, ...]) -> float:
    """How many runs of `box` (its elements contiguous in its row-major array of `shape`) an execution
    inside `loops` starts where no run of the execution before ended, on average. The hardware
    prefetchers follow a run from line to line, so a box that the innermost loop of more than one trip
    (`_innermost_loop`) moves along its runs, by at most their length, streams on, where its runs are
    `FOLLOWED_RUN_BYTES` long or more; one it moves to other rows or back, or along runs shorter than that,
    starts every run anew, each waiting for its first lines (`Machine.l3_restart_seconds`); and one it
    moves along its runs restarts them where that loop starts over (one execution of its trips). The
    innermost loop alone decides, which the sketches' signatures name for each run of loops that holds
    transfers (`swauto.tuner.sketch`). YOLOv2 conv1 at B = 1, C tiles of 16 image rows x 8 columns (16
    runs of 1 KB in a 22 MB output): 8.2 - 9.1 ms with the rows' loop innermost around the output's
    transfers, 5.0 - 6.4 with the columns' (medians, in turns); priced alike without this."""
    loop = _innermost_loop(loops)
    if loop is None:
        return 0.0
    box = box.bounding_box()
    extents = box.spans()
    axis = _run_axis(extents, shape)
    if axis is None:
        return 0.0  # the whole array: one run, which the box never leaves
    runs = prod(extents[:axis])
    moves = []
    for start in box.starts:
        form = ex.linear_form(start)
        if form is None:
            return runs  # moved in a way that is not linear: taken as anew each time
        moves.append(form[0].get(loop.var, 0) * loop.stride)
    if not any(moves):
        return 0.0  # the box stays where it was: its lines are in the cache
    followed = 4 * prod(extents[axis:]) >= FOLLOWED_RUN_BYTES
    if followed and 0 < moves[axis] <= extents[axis] and not any(move for a, move in enumerate(moves) if a != axis):
        return runs / trip_count(loop)  # along its runs: anew only where the loop starts over
    return runs


# The shortest runs a box moved along them streams on in (`_restarted_runs`). GEMM 32768 x 256 x 128 on a
# Zen 5 (C = A B, 32 MB of C written in place, rows of 1 KB), one thread, in turns: calls under K > M > N
# with N tiles of 32 and 64 (runs of 128 and 256 bytes, followed call after call) at 80 - 82% of the FMA
# peak, of 128 at 80 - 89% (M tiles of 128, 32, 64), whole rows under N > K > M at 89 - 91%; priced 9.11 ms
# against 9.24 while the shorter runs counted as followed, and the slowest picked. (With K = 128 and C rows of
# 1 KB, a 128- or 512-byte piece cost 2 - 2.7 ns more than whole rows, as a restarted run is calibrated there;
# what calls of 32 rows in 512-byte pieces lose beyond that is not priced: docs/host_journal.md.)
FOLLOWED_RUN_BYTES = 1024


def _level(footprint: int, machine: Machine) -> str:
    """The cache level `footprint` bytes stay in, as the `Machine` fields name it: "l2" within half of
    the L2, "l3" within the L3's reach, else "dram"."""
    if footprint <= machine.l2_bytes // 2:
        return "l2"
    return "l3" if footprint <= machine.l3_reach else "dram"


def _view_bandwidth(footprint: int, machine: Machine) -> float:
    """The rate a tile in place moves at where `footprint` bytes of tensors live."""
    return getattr(machine, f"{_level(footprint, machine)}_view_bandwidth")


def _stream_bandwidth(footprint: int, machine: Machine) -> float:
    """The rate a map's tiles move at where `footprint` bytes of tensors live."""
    return getattr(machine, f"{_level(footprint, machine)}_stream_bandwidth")


def _restart_seconds(footprint: int, machine: Machine) -> float:
    """What a restarted run (`_restarted_runs`) costs where `footprint` bytes live: nothing within half
    the L2 (its lines come before the copy or micro-kernel misses them), else the measured cost in L3
    or beyond its reach."""
    level = _level(footprint, machine)
    return 0.0 if level == "l2" else getattr(machine, f"{level}_restart_seconds")


def _level_bandwidth(footprint: int, machine: Machine) -> float:
    """The copy bandwidth of the cache level `footprint` bytes stay in (`_level`; beyond L1)."""
    return getattr(machine, f"{_level(footprint, machine)}_bandwidth")


def _holds_transfer(outer: For, inner: For) -> bool:
    """Whether `outer`'s body holds a transfer beside the loop `inner` nested in it (not inside it)."""
    return any(isinstance(node, Dma) for stmt in _statements(outer.body) if stmt is not inner
               for node, _ in walk(stmt))


def _statements(body: Stmt) -> list[Stmt]:
    """The statements of a loop body, nested sequences flattened."""
    return [inner for stmt in body.stmts for inner in _statements(stmt)] if isinstance(body, Seq) else [body]


def _node_cost(node: Dma | Call, machine: Machine, source_bandwidth: float, tile: tuple[int, int],
               shapes: Mapping[str, tuple[int, ...]] | None = None, taps: int = 1,
               cycled: int = 1, crowded: bool = False) -> tuple[int, int, float, float]:
    """(flops, copied bytes, compute seconds, traffic seconds) of one execution of `node`: a copy, a
    GEMM on register tiles of `tile` (rows, vectors), or a map or reduction on tiles in the caches
    (its operands' bytes at a map's measured bandwidth on tiles in L1 where they fit it, else on tiles
    in L2; its output's once per `taps` executions where
    the loops around it run inside its points (`taps_around`); its operations one per lane of a vector
    FMA slot, or one per slot where its lanes are not contiguous in memory: a lower bound where it
    calls a libm function). A copy whose rows in the tensor are shorter than a cache line moves a line
    per row. `shapes`: the arrays' (`whole_vectors`). `cycled`: a GEMM's vector panels that take turns
    in the cache (`_cycled_panels`). `crowded`: a GEMM whose boxes crowd its L2 sets (`_crowds_l2_sets`), its
    broadcast rows read again from the L3."""
    from swauto.backends.host.primitives import contiguous_lanes, multiply_adds

    if isinstance(node, Dma):
        box = node.tensor
        size = 4 * prod(box.extents)
        # An NCHW output pixel's 64 channels: 64 lines of 64 bytes for 256 bytes of data. A row is a
        # contiguous block of the transfer in the tensor (`dma_pattern`): whole inner axes join it, and a
        # window of joined kernel taps (more axes than its tensor) has its own (Inception-v3 Conv2d_2b_3x3
        # with a kernel row's taps in K, rows of 3 x 32 channels, was priced a line per 4 bytes: 32.0 ms
        # where it ran 9.4; now 11.7).
        engine = node.moved_box()
        shape = (shapes or {}).get(box.name, engine.bounding_box().spans())  # no shapes: the box alone
        row = 4 * dma_pattern(shape, engine.extents, engine.steps, engine.walks).block
        moved = size // row * CACHE_LINE_BYTES if row < CACHE_LINE_BYTES else size
        return 0, size, 0.0, moved / source_bandwidth
    if node.signature.kind != "gemm":
        touched = 4 * sum(prod(access.extents) / (taps if role == "Z" else 1) for role, access in node.operands)
        rate = machine.kernel_flops / 2 / (1 if contiguous_lanes(node, shapes) else machine.vector_lanes)
        # A transform's flops count a multiply and an add per nonzero of its matrix; its code adds or
        # subtracts the elements of its coefficients of 1 and -1 (`emit_transform`): one operation. A
        # multiply-accumulate map's multiply and add are one multiply-add (`multiply_adds`).
        operations = node.flops / 2 if node.signature.kind == "transform" or multiply_adds(node) else node.flops
        tiles = 4 * sum(prod(access.padded_extents()) for _, access in node.operands)
        bandwidth = machine.l1_map_bandwidth if tiles <= machine.l1_bytes else machine.l2_map_bandwidth
        return node.flops, 0, operations / rate, touched / bandwidth
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import Knobs
    from swauto.backends.host.layout import gemm_roles, whole_vectors
    from swauto.backends.host.microkernel import lane_groups

    roles = gemm_roles(node)
    sizes = {dim: int(value) for dim, value in node.sizes}
    u, v = roles["broadcast"][0], roles["vector"][0]
    rows, vectors = tile
    # Columns left over from whole vectors run in narrower vectors (`lane_groups`), each costing a whole
    # one's time; where the vector operand's lanes are not contiguous in memory, every lane runs alone.
    width = machine.vector_lanes
    knobs, isa = Knobs(rows, vectors), select()
    whole = whole_vectors(node, knobs, width, shapes)
    slots = len(lane_groups(sizes[v], width)) if whole else sizes[v]
    compute = 0.0
    # Register tiles: the column tiles of `Knobs.column_tiles` (narrower ones with more rows:
    # `Knobs.rows_for`), each in whole row tiles and one of the rows left over, K steps of `k_step_seconds`.
    for tile_vectors, column_tiles in knobs.column_tiles(slots):
        whole_rows = knobs.rows_for(tile_vectors, isa)
        for tile_rows, row_tiles in ((whole_rows, sizes[u] // whole_rows), (sizes[u] % whole_rows, 1)):
            accumulators = tile_rows * tile_vectors
            if accumulators and row_tiles:
                step = k_step_seconds(tile_rows, tile_vectors, width, machine.kernel_flops,
                                      machine.latency_accumulators, machine.load_slots)
                compute += row_tiles * column_tiles * (sizes["K"] * step + accumulators * machine.accumulator_seconds)
    # Each row tile reads the vector operand's whole panel (K x the vectorized dimension). A panel larger
    # than the L1 cache comes from L2, or L3 where it outgrows a quarter of the L2, at the rate the micro-kernel
    # was measured to stream a panel in from there (`_panel_bandwidths`): with few rows per panel the
    # stream, not the FMAs, is the limit (M = 2 columns against a 384 x 384 weight: measured 1.6x the FMAs' time).
    # Likewise each column tile reads the broadcast operand's rows (K x the other dimension): narrow
    # column tiles read it more often (GEMM 128 x 4096 x 512 in tiles of 32 x 32 x 512: 77 GFLOPS, in
    # tiles of 32 x 64 x 512: 87; priced alike without this).
    # Loops around the call that cycle `cycled` panels (each call its own) evict one another's from L1
    # where together they do not fit: NCHW at B = 1, one pixel per GEMM, its 3 x 3 taps innermost (9
    # weight panels of 16 KB: measured 4.75 ms, priced 3.16 as if each stayed in L1).
    # The first read of a panel in a call comes from where the panels cycled since its last call leave
    # it, the row tiles after it from where one column tile's slice of it fits: the micro-kernel runs
    # every row tile of a column tile before the next (GEMM 2048^3 in tiles of 64 x 512 x 512: a 1 MB
    # panel in 128 KB slices, measured 116 ms, priced 434 as if every row tile read it whole out of L3).
    panel = 4 * sizes["K"] * sizes[v]
    column_slice = 4 * sizes["K"] * min(sizes[v], vectors * width)
    broadcast = 4 * sizes["K"] * sizes[u]
    # A slice stays in L2 up to half of it: while the row tiles re-read it, only their broadcast rows
    # stream past (GEMM 2048^3 in calls of 128 x 256 x 2048, 512 KB slices: priced 97 ms from L3, ran 81).
    streamed = (panel / _panel_bandwidth(panel * cycled, machine)
                + (-(-sizes[u] // knobs.rows_for(min(slots, vectors), isa)) - 1) * panel
                / _panel_bandwidth(column_slice, machine, l2_share=2))
    # The broadcast rows stream under the FMAs from L2; a block beyond a quarter of it comes from L3 at every
    # column tile, and the micro-kernel waits for it (GEMM 2048^3 on one thread, 40 candidates in turns: the
    # pick, 512 broadcast rows x K = 256, priced 74.3 GFLOPS, ran at 54.5 - 61.1; 256 rows x K = 128, priced
    # 68.8, at 58.9 - 73.6; the pick / the best of the sample at 1024^3 60.7 / 74.7, 2048^3 on two threads
    # 101.6 / 131.9).
    rows = -(-slots // vectors) * broadcast / (machine.l3_panel_bandwidth if crowded
                                                else _panel_bandwidth(broadcast, machine))
    # The streams overlap the FMAs as calibration measured (`overlapped`): not wholly where both take about
    # as long (ResNet-50 res4_1x1a at B = 1, calls of 4 rows against a 512 KB weight panel in L2: priced
    # 1.42 ms as if the stream hid under the FMAs; calls of 28 and 252 rows priced 1.44 ran 1.11 - 1.19x as
    # fast in turns, in two runs: 1.64 and 2.33 ms against 1.33 - 2.12).
    if broadcast <= machine.l2_bytes // 4 and not crowded:
        return node.flops, 0, overlapped(compute, streamed + rows, machine.overlap_exponent), 0.0
    return node.flops, 0, overlapped(compute, streamed, machine.overlap_exponent) + rows, 0.0


def overlapped(first: float, second: float, exponent: float) -> float:
    """The time of two streams of work that overlap as the p-norm of their times, p = `exponent`: the
    longer one, plus a share of the shorter that grows as they near each other (both `exponent`-th roots
    of 2 times as long where they are equal)."""
    longer, shorter = max(first, second), min(first, second)
    return longer * (1 + (shorter / longer) ** exponent) ** (1 / exponent) if longer > 0 else 0.0


def k_step_seconds(rows: int, vectors: int, lanes: int, kernel_flops: float, latency_accumulators: float,
                   load_slots: float) -> float:
    """One K step of a register tile of `rows` x `vectors` of `lanes` on panels in L1, with the calibration's
    figures of those names: its FMAs, or the FMA latency where it has too few accumulators to hide it, or its
    loads (a vector per column group, an element per row) where it has few rows or few vectors."""
    return max(rows * vectors, latency_accumulators, (rows + vectors) * load_slots) * 2 * lanes / kernel_flops


def _panel_bandwidth(footprint: int, machine: Machine, l2_share: int = 4) -> float:
    """The rate the micro-kernel streams an operand in at from where `footprint` bytes fit: infinite
    from L1 (its loads are the K step's own, priced there), else from L2 within 1 / `l2_share` of it
    (the rate was measured on a quarter), else from L3."""
    if footprint <= machine.l1_bytes:
        return math.inf
    return machine.l2_panel_bandwidth if footprint <= machine.l2_bytes // l2_share else machine.l3_panel_bandwidth


def _default_tile() -> tuple[int, int]:
    """(rows, vectors) of the default micro-kernel of the instruction set the host compiles for."""
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import default_knobs

    knobs = default_knobs(select())
    return knobs.rows, knobs.vectors


def _transposing_buffers(nodes: list[tuple[Dma | Call, tuple[For, ...]]]) -> set[str]:
    """Buffers the micro-kernel reads as its vector operand, packed with the vectorized dimension
    innermost, whose transfers bring another dimension innermost: their copies transpose. (`nodes`:
    the module's transfers and calls.)"""
    from swauto.backends.host.layout import gemm_roles, innermost_dim

    vectorized = {}
    for node, _ in nodes:
        if isinstance(node, Call) and node.signature.kind == "gemm":
            dim, access = gemm_roles(node)["vector"]
            vectorized[access.name] = dim
    transposing = set()
    for node, _ in nodes:
        if isinstance(node, Dma) and node.buffer.name in vectorized:
            innermost = innermost_dim(node.tensor)
            if innermost is not None and innermost != vectorized[node.buffer.name]:
                transposing.add(node.buffer.name)
    return transposing


def _rows_in_place(nodes: list[tuple[Dma | Call, tuple[For, ...]]], views: Mapping[str, str]) -> set[str]:
    """The `views` that GEMMs only read as their broadcast rows (no call writes them). Those rows only stream
    into the micro-kernel, as its rows do on every column tile (`_node_cost`), from where the tensors
    live: their transfer costs the bytes at the rate it streams a panel from there, not at the rate of
    C tiles read and written in place (GEMM 1024^3 on one thread, in turns: the rows in place and the
    vector panel packed once per column block ran at 72 - 78 GFLOPS, 1.08 - 1.27x the rows in place once
    per row block and the panel packed for each call, in three pairs of tiles; priced the other way).
    (`nodes`: the module's transfers and calls.)"""
    if not views:  # most estimates: the tensors beyond half the L3, or nothing held in place
        return set()
    from swauto.backends.host.layout import gemm_roles

    calls = [node for node, _ in nodes if isinstance(node, Call)]
    broadcast = {gemm_roles(call)["broadcast"][1].name for call in calls if call.signature.kind == "gemm"}
    return (views.keys() & broadcast) - {call.output.name for call in calls}


def _prepacked(module: Module, views: Mapping[str, str]) -> set[str]:
    """The buffers of `module` the host fills from prepacked arrays of a constant's tiles (those not `views`)."""
    if not any(tensor.is_constant for tensor in module.tensors):
        return set()
    from swauto.backends.host.prepack import prepacked

    return set(prepacked(module, views))


def _footprint(module: Module) -> int:
    """The bytes of `module`'s tensors: the level they fit decides where its transfers come from."""
    return sum(4 * prod(tensor.shape) for tensor in module.tensors)


def _drained_in_place(body: Stmt, written: set[str] | frozenset[str]) -> frozenset[str]:
    """Of the views calls write in place (`written`: no transfer fills them), those only GEMM calls write:
    their bytes reach the tensor as the micro-kernel's stores of its accumulators, which drain to where the
    tensor lives while the next calls' FMAs run, so their put's traffic hides under the compute of the calls
    that write them (`estimate`). A tile zeroed before calls accumulate into it is written at once by the
    zeroing (a zeroing a GEMM right after it overwrites is folded into it: `fold_zeros`), which waits on
    the lines it misses. VGG16 conv1_1 at B = 1 on 56 x 56 pixels (output 802 KB, at the L3's rate), in
    turns: tiles of 16 pixels zeroed, then three calls of K = 9 into each, priced 0.189 ms, ran 0.19; tiles
    of 4 pixels one call of K = 27 writes, priced 0.192 with its puts' 0.057 ms, ran 0.145."""
    if not written:
        return frozenset()
    from swauto.passes.fold_zeros import fold_zeros_in

    # As the backend runs it: a zeroing a GEMM right after it overwrites is folded into that GEMM. One walk
    # collects the zeroed tiles and those other calls write.
    excluded = {node.buffer.name if isinstance(node, Zero) else node.output.name
                for node, _ in walk(fold_zeros_in(body))
                if isinstance(node, Zero) or isinstance(node, Call) and node.signature.kind != "gemm"}
    return frozenset(written) - excluded


def _in_place_allowed(module: Module, machine: Machine) -> bool:
    """Whether the backend may hold `module`'s tiles in place (`backends/host/codegen.in_place_allowed`)."""
    from swauto.backends.host.codegen import in_place_allowed

    return in_place_allowed(module, machine.l3_bytes, machine.dram_views)


def _trips(loops: tuple[For, ...]) -> int:
    return prod(trip_count(loop) for loop in loops)


# --- calibration ----------------------------------------------------------------------------------


def machine(cache_dir: Path | None = None) -> Machine:
    """The calibration of this machine from the cache directory, measured (`calibrate`: up to about a minute) and
    stored first when missing, outdated, made on another CPU or damaged (a damaged file is said once, as a
    `CacheWarning`). A calibration that could not be stored is measured once per process."""
    path, cpu = _calibration_file(cache_dir), _cpu()
    try:
        status = path.stat()
        version: tuple[int, int, int] | None = (status.st_ino, status.st_mtime_ns, status.st_size)
    except OSError:
        version = None
    loaded = _LOADED.get((path, cpu))
    if loaded is not None and version is not None and loaded[0] == version:
        return loaded[1]  # the model asks for every candidate: the file is parsed again only when it changed
    stored = _load_calibration(path, cpu)
    if stored is not None and version is not None:
        _LOADED[(path, cpu)] = (version, stored)
    if stored is not None:
        return stored
    return _MEASURED.get((path, cpu)) or recalibrate(cache_dir)


def recalibrate(folder: Path | None = None) -> Machine:
    """Measure this machine again now (up to about a minute), store it in `folder` (default: the cache folder) and
    return it. A calibration that still looks disturbed after `calibrate`'s retries, or a folder that cannot
    be written, is used by this process only and said as a `CacheWarning`; the next process measures again."""
    from swauto.cache import warn_once, warn_unusable, write_atomically

    path, cpu = _calibration_file(folder), _cpu()
    # Said before the wait (the `swauto` command shows it; a program, where it turns on the `swauto` logger).
    _log.info("measuring this machine for the host model (up to a minute, once per CPU and instruction set) ...")
    measured = calibrate(cpu)
    _MEASURED.pop((path, cpu), None)
    problem = disturbed(measured)
    if problem:
        warn_once("disturbed", path, f"the host calibration looks disturbed ({problem}: was another program "
                                     "running?); it is not stored, the next process measures again")
    else:
        try:
            write_atomically(path, json.dumps({"version": CALIBRATION_VERSION, "machine": asdict(measured)},
                                              indent=2).encode())
            return measured
        except OSError as error:
            warn_unusable(error, path.parent)
    _MEASURED[(path, cpu)] = measured
    return measured


# Calibrations this process measured but could not store or trust, by (file, cpu): pricing every candidate
# must not measure again.
_MEASURED: dict[tuple[Path, str], Machine] = {}
# Calibrations read from their files, by (file, cpu), with the file's inode, modification time and size
# when read (a calibration is written to a new file renamed over the old: a new inode).
_LOADED: dict[tuple[Path, str], tuple[tuple[int, int, int], Machine]] = {}


def _calibration_file(folder: Path | None) -> Path:
    """`CALIBRATION_FILE` in `folder` (the cache folder by default) for the instruction set this CPU compiles
    for unless told otherwise; a file of its own for one forced by $SWAUTO_HOST_ISA, so that forcing one
    does not replace the other's calibration (a forced AVX2 run on an AVX-512 machine did, and the next
    run measured the machine again, into other register tiles and other picks)."""
    from swauto.backends.host.isa import detect, select
    from swauto.cache import cache_dir

    isa = select().name
    name = CALIBRATION_FILE if isa == detect().name else CALIBRATION_FILE.replace(".json", f".{isa}.json")
    return (folder or cache_dir()) / name


def _cpu() -> str:
    """What a calibration is valid for: the CPU's name, the instruction set compiled for and its features."""
    from swauto.backends.host.isa import ENV_VAR

    return _cpu_with(os.environ.get(ENV_VAR) or None)


@functools.cache
def _cpu_with(isa: str | None) -> str:
    """`_cpu` when the instruction set asked for is `isa` (the model asks for every candidate)."""
    from swauto.backends.host.isa import host_cpu, select, target_features

    features = hashlib.sha256(target_features(select(isa)).encode()).hexdigest()[:12]
    return f"{host_cpu()[0]} {select(isa).name} {features}"


def _load_calibration(path: Path, cpu: str) -> Machine | None:
    """The calibration stored at `path` for `cpu`, or None: missing, of another version or CPU, or damaged
    (not JSON, the wrong shape, a constant out of range: said once, as a warning)."""
    from swauto.cache import warn_once, warn_unusable

    try:
        stored = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as error:  # the folder is not one, or cannot be read
        warn_unusable(error, path.parent)
        return None
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested too deep
        problem = str(error)
    else:
        try:
            if stored["version"] != CALIBRATION_VERSION or stored["machine"]["cpu"] != cpu:
                return None  # outdated or another CPU: measured again, nothing wrong with the file
            loaded = Machine(**stored["machine"])
            problem = disturbed(loaded) or _unfit(loaded.register_tiles)
            if problem is None:
                return loaded
        except (TypeError, KeyError, ValueError) as error:  # the wrong shape, a field missing or out of range
            problem = str(error) or type(error).__name__
    warn_once("damaged", path, f"the host calibration {path} is unusable ({problem}); measuring this machine again")
    return None


# The micro-kernel's rate against the in-register FMA peak: a quiet machine's is about 0.9 (it also loads its
# operands); far below, its measurement was disturbed (another process ran); above, the peak's was.
PLAUSIBLE_KERNEL_FRACTION = (0.5, 1.2)
CALIBRATION_ATTEMPTS = 3
# Below this fraction the micro-kernel is measured again (the best attempt kept): on a virtual machine whose
# neighbours take turns, four rounds in a row ran at 74-83% of what the fifth did (0.97 of the peak).
QUIET_KERNEL_FRACTION = 0.85


# The native pool's fork and join of an almost empty call: about 2 us on a quiet 2-core machine, tens
# on a many-core one; milliseconds only where a thread waited for a core another process held.
PLAUSIBLE_FORK_JOIN_SECONDS = 1e-4


def disturbed(measured: Machine) -> str | None:
    """Why `measured` cannot be what this machine does when quiet, or None."""
    if measured.parallel_call_seconds > PLAUSIBLE_FORK_JOIN_SECONDS:
        return f"sharing a call out to the cores took {measured.parallel_call_seconds * 1e6:.0f} us"
    return _implausible(measured.kernel_flops, measured.peak_flops)


def _implausible(kernel_flops: float, peak_flops: float) -> str | None:
    low, high = PLAUSIBLE_KERNEL_FRACTION
    if low <= kernel_flops / peak_flops <= high:
        return None
    return f"the micro-kernel ran at {kernel_flops / peak_flops:.0%} of the in-register FMA peak"


def calibrate(cpu: str) -> Machine:
    """Measure this machine's constants (up to about a minute): each the best of several short runs, so a run that
    another process interrupted does not count, each timed while the core reads quiet (`tuner/quiet`: a
    core shared with another tenant's thread for seconds at a time ran the micro-kernel 20% and maps in
    L1 half as fast); the micro-kernel is measured again (up to `CALIBRATION_ATTEMPTS` times in all)
    while it runs below `QUIET_KERNEL_FRACTION` of the FMA peak, and the fork and join while it looks
    disturbed. Where the core first read quiet only after the measuring had begun (a reading faster than
    what counted as quiet at the start), every constant is measured again."""
    global _gate
    _gate = QuietCore(_quiet_probe())
    try:
        for _ in range(QUIET_READINGS):
            _gate.quiet()
        for _ in range(2):
            fastest, _gate.budget = _gate.fastest, WAIT_SECONDS
            measured = _measure(cpu)
            if _gate.fastest * QUIET_FRACTION <= fastest:
                break
    finally:
        _gate = QuietCore()
    return measured


# What gates calibration's timings (`_best_seconds`, the register tiles' turns): a `QuietCore` with a probe
# while `calibrate` runs, none otherwise.
_gate = QuietCore()
QUIET_READINGS = 8  # of the probe before measuring: what quiet is to begin with


def _quiet_probe() -> Callable[[], float]:
    """The gate's probe: `l1_map_bandwidth`'s map (what slowed most when the core was shared, about a
    quarter of a millisecond when quiet), its operand bytes per second in the faster of two runs. Timed
    here, not by `_best_seconds`, which waits on the gate."""
    from swauto.backends.host.isa import cache_sizes

    run, touched = _map_run(cache_sizes()[0] // 2)
    run()

    def probe() -> float:
        seconds = float("inf")
        for _ in range(2):
            started = time.perf_counter()
            run()
            seconds = min(seconds, time.perf_counter() - started)
        return touched / seconds

    return probe


def _measure(cpu: str) -> Machine:
    """`calibrate`'s one pass over every constant."""
    from swauto.backends.host.isa import cache_sizes, select
    from swauto.backends.host.knobs import default_knobs

    l1, l2, l3 = cache_sizes()
    peak, rate = fma_peak(), _kernel_rate()
    for _ in range(CALIBRATION_ATTEMPTS - 1):
        if rate["kernel_flops"] >= QUIET_KERNEL_FRACTION * peak and _implausible(rate["kernel_flops"], peak) is None:
            break
        peak = max(peak, fma_peak())
        rate = max(rate, _kernel_rate(), key=lambda rate: rate["kernel_flops"])
    # A copy within a nearer level is never slower than one beyond it; a reading that says so was
    # disturbed (seen: L2 below L3 while two test processes ran), and the model's bounds assume the order.
    # Bytes of a copy that lives in DRAM: source and target together twice the L3 (four times took 1 GB
    # arrays and 8 of calibration's 11 s on a 260 MB L3, in every test process).
    beyond_l3 = max(l3, 64 << 20)
    dram = _copy_bandwidth(beyond_l3)
    l3_array = min(l3 // 4, 8 << 20)
    l3_copy = max(_copy_bandwidth(l3_array), dram)
    reach = _l3_reach(l3_array, l3, l3_copy, dram)
    l1_map = _map_bandwidth(l1 // 2)  # the stream rates take the maps' own time out at it
    return Machine(
        cpu=cpu,
        measured=datetime.date.today().isoformat(),
        **rate,
        vector_lanes=select().width,
        l1_map_bandwidth=l1_map,
        l2_map_bandwidth=_map_bandwidth(l2 // 2),
        **_panel_bandwidths(l2, l3, rate),
        l2_bandwidth=max(_copy_bandwidth(l2 // 4), l3_copy),
        l3_bandwidth=l3_copy,
        dram_bandwidth=dram,
        dram_bandwidth_total=_copy_bandwidth(beyond_l3, threads=2),
        transpose_bandwidth=_transpose_bandwidth(min(l2 // 2, 1 << 20)),
        l1_bytes=l1,
        l2_bytes=l2,
        l3_bytes=l3,
        l3_reach=reach,
        peak_flops=peak,
        register_tiles=(tiles := register_tiles()),
        output_views=output_views(tiles[0]),
        dram_views=(beyond := dram_views(tiles[0], l3)),
        parallel_call_seconds=_fork_join_seconds(),
        **_in_place_rates(l2, reach, knobs := replace(default_knobs(select()), dram_views=beyond)),
        **_stream_rates(l2, reach, l1_map, knobs),
    )


def _fork_join_seconds() -> float:
    """`parallel_call_seconds`, measured again (up to `CALIBRATION_ATTEMPTS` times in all) while it is
    beyond what a quiet machine takes; the least of the attempts."""
    seconds = parallel_call_seconds()
    for _ in range(CALIBRATION_ATTEMPTS - 1):
        if seconds <= PLAUSIBLE_FORK_JOIN_SECONDS:
            break
        seconds = min(seconds, parallel_call_seconds())
    return seconds


def _kernel_rate() -> dict[str, float]:
    """The default micro-kernel on cache-resident packed panels, one core, timed at a long and a short
    K: its flops per second in the K loop and its seconds per accumulator vector outside it (a call
    costs accumulators x (K x FMA time + accumulator time)); then on one row, on panels in L1 (a panel
    that streams from L2 is priced apart), each a K step's time in FMA slots: with one vector, whose
    one accumulator waits on the FMA latency (how many accumulators would hide it), and in a register
    tile of one row and as many vectors as hide that latency, whose step loads them and a broadcast
    element (what a load takes). That row runs as its own register tile: in the default tile's
    narrower columns each column tile would wait on the latency (a Zen 3's 4 x 2 tile: 2.5 slots a
    load, where a 1 x 7 tile measured 1.1, and the model priced the default tile's K step at 15 slots
    for its 8 FMAs, its whole GEMMs at about half the rate they ran)."""
    from swauto.backends.host import compile_module
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import Knobs

    def seconds_per_call(*shapes: tuple[int, int, int], knobs: Knobs | None = None) -> list[float]:  # (m, k, n)
        # Short runs (a few milliseconds), so that some of them run without another process interrupting,
        # in rounds over all the shapes: each is a difference of two of them, which a slow moment of the
        # machine under one alone would skew (seen: the first in a process 20% slow).
        runs = []
        for m, k, n in shapes:
            module = kernel_benchmark_module(repeat=100 * (KERNEL_BENCHMARK[0] // m), m=m, k=k, n=n)  # same work
            program = compile_module(module, knobs=knobs)
            calls = sum(_trips(loops) for node, loops in walk(module.body) if isinstance(node, Call))
            runs.append((program, calls))
        functions = [lambda p=program: p.run({}, threads=1) for program, _ in runs]
        _warm_up(functions[0])
        best = _interleaved_best(functions, runs=3, rounds=5)
        return [seconds / calls for seconds, (_, calls) in zip(best, runs, strict=True)]

    m, n = KERNEL_BENCHMARK
    width = select().width
    _, vectors = _default_tile()
    long, short, one_long, one_short = seconds_per_call((m, 128, n), (m, 8, n), (1, 64, width), (1, 8, width))
    per_k = (long - short) / (128 - 8)  # one K step of every accumulator
    fma = per_k / (m * n / width)  # seconds per vector FMA
    # FMA slots of one K step of a one-row tile, panels in L1.
    latency = max(1.0, (one_long - one_short) / (64 - 8) / fma)
    # The loads: a one-row tile with accumulators enough to hide the latency (else its step measures the
    # latency: 4 vectors on a core with two FMA pipes of 4 cycles measured 1.9 slots a load, not 1).
    loaded = max(vectors, min(math.ceil(latency), (select().registers - 2) // 2))
    loaded_long, loaded_short = seconds_per_call((1, 64, loaded * width), (1, 8, loaded * width),
                                                 knobs=Knobs(1, loaded))
    return {"kernel_flops": 2 * width / fma,
            "accumulator_seconds": max(0.0, short - 8 * per_k) / (m * n / width),
            "latency_accumulators": latency,
            "load_slots": max(0.01, (loaded_long - loaded_short) / (64 - 8) / fma / (loaded + 1))}


# GEMMs that tell register tiles apart (C += A B, 1024 x 1024 x 256: operands out of L2, as in the
# GEMMs and convolutions tuned; at 512^3, from L2, every tile ran within a few percent): tiles of C and
# K, the loops' order, outermost first, and the vectorized dimension. Between them, both operands are
# broadcast, and the vector operand's panel is long and short.
TILE_BENCHMARKS = (((32, 512, 256), ("N_outer", "M_outer", "K_outer"), "M"),
                   ((32, 64, 256), ("K_outer", "M_outer", "N_outer"), "M"),
                   ((128, 256, 256), ("N_outer", "K_outer", "M_outer"), "N"))
TILE_BENCHMARK_GEMM = """operator gemm(M = 1024, N = 1024, K = 256) {
  tensor A[M, K]
  tensor B[K, N]
  tensor C[M, N]
  compute { gemm(M = M, N = N, K = K, A = A, B = B, C += C) }
  schedule { split gemm.M by {TM} split gemm.N by {TN} split gemm.K by {TK} reorder any vectorize gemm over {M, N} }
}"""
# How many tiles the space explores: the fastest of as many widths (they differ by a few percent on whole
# GEMMs; more would only multiply the space).
EXPLORED_TILES = 3


# Register tiles count as tied (`register_tiles`), and views as fast as copies (`output_views`), within this
# fraction: a busier moment of the machine cannot turn the choice over by a few percent.
TILE_TOLERANCE = 0.03
TILE_ROUNDS = 5


def register_tiles() -> tuple[tuple[int, int], ...]:
    """The register tiles of `register_tile_choices` that run the `TILE_BENCHMARKS` GEMMs fastest on one
    core (geometric mean of their times), one of each width (vectors), `EXPLORED_TILES` widths, fastest
    first; tiles within `TILE_TOLERANCE` of the fastest count as tied, and of those the one of more
    accumulators comes first (within a width, more FMAs per register loaded; across widths not always:
    9 x 3 holds 27 accumulators for 12 loads a K step, 6 x 4 24 for 10), then of more rows.

    One tile per width, because tiles of one width differ only in rows, and a call's rows often cut
    them alike: where they run over two axes (a convolution's columns x 8 images) the micro-kernel
    takes the most rows down to half the tile's that tile them evenly (`microkernel.aligned_rows`), so
    a 6 x 4 and a 4 x 4 tile both run 4 x 4 there, a 9 x 3 runs 8 x 3. On an Emerald Rapids guest,
    calibration had ranked 6 x 4 and 4 x 4 first (9 x 3 within 4% of 6 x 4 in a later ranking). With
    three widths explored, the picks of the 121 layers at B = 8, one thread, ran 1.02 - 1.07x as fast
    in geometric mean (four runs in turns, whichever of 6 x 4 and 9 x 3 came first); at B = 1
    0.995 - 1.01x, the GEMM benchmark's 1.015 - 1.04x.

    On a Zen 3 the 6 x 2, 4 x 3 and 4 x 2 tiles ran within 0.2 - 3.4% of
    each other here, and each came first in some of seven calibrations in a row; the model's picks for
    121 convolutions then differed in 59 - 87 layers between calibrations whose first tiles differed
    (36 - 38 where they did not); 4 x 2 ran slower in whole GEMMs (below). Whole GEMMs, not the
    micro-kernel on cache-resident panels, where every tile runs within a percent: how the broadcast
    operand streams from memory is what tells them apart. Each tile's time is its median over
    `TILE_ROUNDS` rounds that run all the tiles in turn: a core shared with another tenant for a while
    slows every tile alike. Measured alone, not after the instruction set's default tiles
    (`HOST_MICRO_KERNELS`, another CPU's winners): preferring those within 3% of the fastest put a Zen
    3's 4 x 2 tile first in two of three calibrations, where three rankings in a row measured it 8 -
    18% slower than the 4 x 3 (four GEMM 1024^3 candidates: 52 - 68% of the peak in it, 71 - 77% in 4 x 3
    and 6 x 2)."""
    from swauto.backends.host import compile_module
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import register_tile_choices
    from swauto.tuner.measure import median_seconds_in_turns

    arrays = _tile_benchmark_arrays()
    programs = []  # (tile, program)
    for module in _tile_benchmark_modules():
        programs += [((knobs.rows, knobs.vectors), compile_module(module, knobs=knobs))
                     for knobs in register_tile_choices(select())]
    seconds = median_seconds_in_turns([lambda program=program: program.run(arrays, threads=1)
                                       for _, program in programs], runs=2, rounds=TILE_ROUNDS, ready=_gate.wait)
    logs: dict[tuple[int, int], float] = {}
    for (tile, _), elapsed in zip(programs, seconds, strict=True):
        logs[tile] = logs.get(tile, 0.0) + math.log(elapsed) / len(TILE_BENCHMARKS)  # geometric mean
    fastest = min(logs.values())

    def rank(tile: tuple[int, int]) -> tuple[float, ...]:
        rows, vectors = tile
        if logs[tile] - fastest <= math.log(1 + TILE_TOLERANCE):  # a tie: the tile of more FMAs per load
            return (0, -rows * vectors, -rows)
        return (1, logs[tile])

    first_of_width: dict[int, tuple[int, int]] = {}
    for tile in sorted(logs, key=rank):
        first_of_width.setdefault(tile[1], tile)
    return tuple(first_of_width.values())[:EXPLORED_TILES]


def output_views(tile: tuple[int, int]) -> bool:
    """Whether the `TILE_BENCHMARKS` GEMMs, with register tile `tile`, run with their C tiles read and written
    in place (views of C) at least about as fast (within `TILE_TOLERANCE`, geometric mean) as with them
    copied in and out: the same GEMMs in the same tiles, medians of rounds in turns (as `register_tiles`).
    C's rows there are 4 KiB apart, a register tile's rows in the same L1 sets: what the answer decides
    (`layout._output_rows_share_sets`; C tiles whose rows do not are views wherever the tensors stay in
    cache). On a Zen 3 the copies (rows padded) ran two of them 3 - 13% faster; on a Zen 4 views ran GEMM
    4096 x 64 x 64 21% faster."""
    from swauto.backends.host.knobs import Knobs

    in_place, copied = _in_place_and_copied(_tile_benchmark_modules(), _tile_benchmark_arrays(),
                                            lambda views: Knobs(*tile, views))
    return in_place <= (1 + TILE_TOLERANCE) * copied


def dram_views(tile: tuple[int, int], l3: int) -> bool:
    """Whether the `DRAM_VIEW_BENCHMARKS` GEMMs (C = A B, N x K `DRAM_VIEW_GEMM`, M rows: tensors of about the
    L3's `l3` bytes, twice the most whose tiles are views anyway), with register tile `tile`, run faster with
    their tiles in place (views of A and C) than copied in and out: medians of rounds in turns, geometric
    mean (as `output_views`). The copies stream, but C's move twice; in place, the micro-kernel waits on lines
    from DRAM. On a Zen 3, GEMM 32768 x 256 x 128 ran 79 GFLOPS in place, 91 copied; on a Zen 5, in turns, the
    model's pick 80% of the FMA peak copied, 90% in place, and GEMM 4096^3 in calls of 64 x 512 x 1024 88%
    and 94%."""
    from swauto.backends.host.knobs import Knobs

    n, k = DRAM_VIEW_GEMM
    m = 256 * math.ceil(l3 / (4 * (n + k) * 256))
    modules = [_benchmark_gemm(tiles, order, "M", {"M": m, "N": n, "K": k}, overwrite=True)
               for tiles, order in DRAM_VIEW_BENCHMARKS]
    rng = np.random.default_rng(0)
    arrays = {"A": rng.standard_normal((m, k), dtype=np.float32),
              "B": rng.standard_normal((k, n), dtype=np.float32), "C": np.zeros((m, n), np.float32)}
    in_place, copied = _in_place_and_copied(modules, arrays, lambda views: Knobs(*tile, dram_views=views))
    return in_place < copied


def _in_place_and_copied(modules: Sequence[Module], arrays: dict[str, np.ndarray],
                         knobs: Callable[[bool], Knobs]) -> tuple[float, float]:
    """The geometric means of `modules`' times compiled with `knobs(True)` (tiles in place) and with
    `knobs(False)` (copied), on `arrays`, one core: medians of `TILE_ROUNDS` rounds in turns."""
    from swauto.backends.host import compile_module
    from swauto.tuner.measure import median_seconds_in_turns

    programs = [compile_module(module, knobs=knobs(views)) for module in modules for views in (True, False)]
    seconds = median_seconds_in_turns([lambda program=program: program.run(arrays, threads=1)
                                       for program in programs], runs=2, rounds=TILE_ROUNDS, ready=_gate.wait)
    return tuple(math.prod(seconds[first::2]) ** (1 / len(modules)) for first in (0, 1))  # type: ignore[return-value]


def _benchmark_gemm(tiles: tuple[int, int, int], order: tuple[str, ...], vectorized: str,
                    params: Mapping[str, int], overwrite: bool = False) -> Module:
    """The host IR of `TILE_BENCHMARK_GEMM` at `params` (its defaults where absent), in tiles of M, N, K of
    `tiles`, in loop `order`; with `overwrite`, C = A B instead of C += A B."""
    from swauto.api import load
    from swauto.machine import HostScratchpad
    from swauto.pipeline import lower
    from swauto.schedule.candidate import Candidate

    text = TILE_BENCHMARK_GEMM.replace("C += C", "C = C") if overwrite else TILE_BENCHMARK_GEMM
    for name, size in zip(("TM", "TN", "TK"), tiles, strict=True):
        text = text.replace(name, str(size))
    candidate = Candidate(tuple(zip("MNK", tiles, strict=True)), order, vectorized)
    return lower(load(text, params), candidate, HostScratchpad())[-1][1]


# N and K of `dram_views`' GEMMs, and their tiles and loop orders: C tiles kept over the K loop, or not.
DRAM_VIEW_GEMM = (256, 128)
DRAM_VIEW_BENCHMARKS = (((128, 32, 128), ("K_outer", "M_outer", "N_outer")),
                        ((256, 256, 64), ("N_outer", "M_outer", "K_outer")))


@functools.cache  # calibration times them twice: for the register tiles, then views against copies
def _tile_benchmark_modules() -> tuple[Module, ...]:
    """The host IR of each of the `TILE_BENCHMARKS` GEMMs."""
    return tuple(_benchmark_gemm(tiles, order, vectorized, {}) for tiles, order, vectorized in TILE_BENCHMARKS)


def _tile_benchmark_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.standard_normal(shape, dtype=np.float32)
            for name, shape in (("A", (1024, 256)), ("B", (256, 1024)), ("C", (1024, 1024)))}


# GEMMs of K = 1 (C += A B: each C tile read and written in place, almost nothing else) whose C tiles,
# 16 rows of 1 KB, follow each other down C's columns, or along its rows.
RESTART_TILES = (("M", 16), ("N", 256), ("K", 1))
RESTART_ORDERS = (("K_outer", "N_outer", "M_outer"), ("K_outer", "M_outer", "N_outer"))  # runs restart, go on
RESTART_COLUMNS = 2048


def restart_modules(rows: int) -> list[Module]:
    """The host IR of the GEMM C += A B, C of `rows` x `RESTART_COLUMNS`, K = 1, in `RESTART_TILES`, in each
    of the `RESTART_ORDERS`: its C tiles' transfers restart their runs at every execution, or where the
    columns' loop starts over."""
    tiles = tuple(size for _, size in RESTART_TILES)
    params = {"M": rows, "N": RESTART_COLUMNS, "K": tiles[2]}
    return [_benchmark_gemm(tiles, order, "M", params) for order in RESTART_ORDERS]  # type: ignore[arg-type]


def _in_place_rates(l2: int, reach: int, knobs: Knobs) -> dict[str, float]:
    """The `restart_modules`, compiled with `knobs` (the calibration's: beyond the L3 its tiles are in
    place as `dram_views` says), with C in L2 (a quarter of it), in L3 (four times the L2, within half the
    L3's reach) and beyond the reach (twice it), timed in interleaved rounds: `*_view_bandwidth`, the
    bytes of C read and written in place over the time of the order whose runs go on (the K = 1 GEMM
    does little else); `l3_restart_seconds` and `dram_restart_seconds`, the difference of the two
    orders' times over the difference of their restarted runs as the model counts them
    (`_restarted_runs`). Nothing is faster beyond a level than within it."""
    from swauto.backends.host import compile_module

    rates = {}
    for level, c_bytes in (("l2", l2 // 4), ("l3", min(4 * l2, reach // 2)), ("dram", 2 * reach)):
        rows = max(1, c_bytes // (4 * RESTART_COLUMNS * 16)) * 16
        modules = restart_modules(rows)
        arrays = {tensor.name: np.ones(tensor.shape, np.float32) for tensor in modules[0].tensors}
        programs = [compile_module(module, knobs=knobs) for module in modules]
        seconds = _interleaved_best([lambda p=p, a=arrays: p.run(a, threads=1) for p in programs], runs=2)
        restarts = [sum(_trips(loops) * _restarted_runs(node.tensor, module.tensor(node.tensor.name).shape, loops)
                        for node, loops in walk(module.body) if isinstance(node, Dma)) for module in modules]
        rates[f"{level}_view_bandwidth"] = 2 * 4 * rows * RESTART_COLUMNS / seconds[1]
        if level != "l2":
            rates[f"{level}_restart_seconds"] = max(0.0, (seconds[0] - seconds[1]) / (restarts[0] - restarts[1]))
    rates["l3_view_bandwidth"] = min(rates["l3_view_bandwidth"], rates["l2_view_bandwidth"])
    rates["dram_view_bandwidth"] = min(rates["dram_view_bandwidth"], rates["l3_view_bandwidth"])
    rates["dram_restart_seconds"] = max(rates["dram_restart_seconds"], rates["l3_restart_seconds"])
    return rates


# A kernel whose parallel loop does almost nothing: a call on every core against one on one core
# times only what sharing it out adds.
PARALLEL_BENCHMARK = """operator add(N = 1024) {
  tensor x[N]
  tensor y[N]
  tensor z[N]
  compute { add(N = N, X = x, Y = y, Z = z) }
  schedule { split add.N by {TILE} }
}"""
STREAM_TILE = 2048  # elements of each operand's tile in `_stream_rates`: the three fit L1


def _add_module(size: int, tile: int) -> Module:
    """The host IR of `PARALLEL_BENCHMARK` on tensors of `size` elements in tiles of `tile`."""
    from swauto.api import load
    from swauto.machine import HostScratchpad
    from swauto.pipeline import lower
    from swauto.tuner.space import explore

    op = load(PARALLEL_BENCHMARK.replace("TILE", str(tile)), {"N": size})
    return lower(op, explore(op, HostScratchpad()).candidates[0], HostScratchpad())[-1][1]


def _stream_rates(l2: int, reach: int, l1_map_bandwidth: float, knobs: Knobs) -> dict[str, float]:
    """`*_stream_bandwidth`: the add `z = x + y` as the backend compiles it with `knobs`, in tiles of
    `STREAM_TILE` (views of the tensors where they are cache-resident, or beyond it where `knobs.dram_views`,
    else copies: `backends/host/layout.plan`), its tensors
    filling the most each level holds as `_level` counts (half the L2, the L3's reach) and beyond the reach
    (twice it), run again and again for about 32 MB moved: the bytes its transfers move over its time less
    its map's operand bytes at `l1_map_bandwidth` (as `_node_cost` prices them on tiles in L1), the best
    of several runs. Nothing is faster beyond a level than within it."""
    from swauto.backends.host import compile_module
    from swauto.ir.expr import Const

    rates = {}
    for level, size in (("l2", l2 // 2), ("l3", reach), ("dram", 2 * reach)):
        module = _add_module(max(STREAM_TILE, size // 12), STREAM_TILE)
        body = module.body.stmts if isinstance(module.body, Seq) else (module.body,)
        allocs = [stmt for stmt in body if isinstance(stmt, Alloc)]
        rest = [stmt for stmt in body if not isinstance(stmt, Alloc)]
        repeat = max(1, (32 << 20) // size)
        program = compile_module(replace(module, body=seq(*allocs, For("repeat", Const(0), Const(repeat), 1,
                                                                          seq(*rest)))),
                                 knobs=knobs)
        arrays = {tensor.name: np.ones(tensor.shape, np.float32) for tensor in module.tensors}
        moved = sum(4 * prod(node.tensor.extents) * _trips(loops)
                    for node, loops in walk(module.body) if isinstance(node, Dma))
        mapped = sum(4 * sum(prod(access.extents) for _, access in node.operands) * _trips(loops)
                     for node, loops in walk(module.body) if isinstance(node, Call)) / l1_map_bandwidth
        seconds = _best_seconds(lambda p=program, a=arrays: p.run(a, threads=1)) / repeat
        rates[f"{level}_stream_bandwidth"] = moved / max(seconds - mapped, seconds / 2)
    rates["l3_stream_bandwidth"] = min(rates["l3_stream_bandwidth"], rates["l2_stream_bandwidth"])
    rates["dram_stream_bandwidth"] = min(rates["dram_stream_bandwidth"], rates["l3_stream_bandwidth"])
    return rates


def parallel_call_seconds() -> float:
    """What a call shared out to every available core takes beyond the same call on one core: the native
    pool's fork and join (`backends/host/threads`), the best of many calls of an almost empty kernel on
    each; 0 where one core is all there is."""
    from swauto.backends.host import available_threads, compile_module

    cores = available_threads()
    if cores == 1:
        return 0.0
    program = compile_module(_add_module(1024, 16))
    arrays = {name: np.ones(1024, np.float32) for name in ("x", "y", "z")}
    one, every = _interleaved_best([lambda: program.run(arrays, threads=1),
                                    lambda: program.run(arrays, threads=cores)], runs=100)
    return max(0.0, every - one)


def _unfit(tiles: tuple[tuple[int, int], ...]) -> str | None:
    """Why a stored calibration's register tiles cannot be compiled for this instruction set, or None."""
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import Knobs

    isa = select()
    unfit = [tile for tile in tiles if not Knobs(*tile).fits(isa)]
    return f"register tile {unfit[0]} does not fit {isa.name}'s registers" if unfit else None


def fma_peak() -> float:
    """This core's peak flops per second for the instruction set the kernels are compiled for: a loop of
    FMAs (a multiply and an add without FMA) on independent accumulators of its widest vectors, held in
    registers (enough of them to cover the FMA latency on every FMA unit), JIT-compiled with llvmlite for
    this CPU; the best of many runs of about a millisecond."""
    loop, _, flops_per_iteration = _fma_loop(_selected_isa())
    iterations = _fma_iterations(loop, 1e-3)
    return flops_per_iteration * iterations / _best_seconds(lambda: loop(iterations, 1.0, 1e-7), 40)


def peak_probe(threads: int = 1, seconds: float = 0.004) -> tuple[Callable[[], object], int]:
    """A call of `fma_peak`'s loop on `threads` cores at once, each running it for about `seconds`, and
    the flops of a call: timed in turns with a kernel, it tells the peak the machine gives in those
    turns (on a shared machine, another tenant on a core's sibling thread takes up to half its FMA
    rate: on a Zen 3 guest this probe read 31.8 - 95.7 GFLOPS over one benchmark run, 90.1 in the
    median), which a peak calibrated once does not. The threads are the kernels' own, the native pool's
    team (`backends/host/threads`), which spin between calls as they do between a kernel's calls (Python
    threads woke slowly after a pause, two of them on one core: the probe read 84 - 146 GFLOPS on two
    Zen 3 cores where the kernels ran 101 - 112); without the native pool, Python threads (the loop
    releases the GIL)."""
    loop, team, flops_per_iteration = _fma_loop(_selected_isa())
    iterations = _fma_iterations(loop, seconds / 2)
    if threads == 1:
        return (lambda: loop(iterations, 1.0, 1e-7)), flops_per_iteration * iterations
    if team is not None:
        return (lambda: team(iterations, threads)), threads * flops_per_iteration * iterations
    pool = _probe_pool(threads)

    def run() -> None:
        for done in [pool.submit(loop, iterations, 1.0, 1e-7) for _ in range(threads)]:
            done.result()

    return run, threads * flops_per_iteration * iterations


@functools.cache
def _probe_pool(threads: int) -> Any:
    """The Python threads `peak_probe` runs on without the native pool: one pool per thread count for the
    process (a benchmark asks for a probe per layer)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(threads, thread_name_prefix="swauto-peak")


def _fma_iterations(loop: Callable[[int, float, float], float], seconds: float) -> int:
    """The fewest iterations of `loop` (a power of two, from 1024) that run for at least `seconds`."""
    iterations = 1 << 10
    while _best_seconds(lambda: loop(iterations, 1.0, 1e-7), 1) < seconds:  # noqa: B023 (called at once)
        iterations *= 2
    return iterations


def _selected_isa() -> str:
    from swauto.backends.host.isa import select

    return select().name


@functools.cache
def _fma_loop(isa_name: str) -> tuple[Callable[[int, float, float], float], Callable[[int, int], None] | None, int]:
    """`fma_loop(iterations, a, b)` (`_fma_loop_ir`) compiled for this CPU with instruction set
    `isa_name` (its engine kept for the process); `fma_team(iterations, threads)`, the loop on each of
    `threads` threads of the native pool's team, or None without the native pool; and the flops of one
    iteration."""
    import ctypes

    import llvmlite.binding as llvm

    from swauto.backends.host import threads as native
    from swauto.backends.host.isa import host_cpu, select, target_features
    from swauto.backends.host.jit import _LLVM_LOCK, _target_machine  # LLVM is not thread-safe: jit's lock

    isa = select(isa_name)
    accumulators = min(16, isa.registers - 4)  # two operands and spare registers besides them
    pooled = native.native()
    text = _fma_loop_ir(isa.width, accumulators, isa.fma) + ("\n" + _FMA_TEAM_IR if pooled else "")
    with _LLVM_LOCK:
        llvm_module = llvm.parse_assembly(text)
        llvm_module.verify()
        engine = llvm.create_mcjit_compiler(llvm_module, _target_machine(host_cpu()[0], target_features(isa)))
        engine.finalize_object()
        loop_address = engine.get_function_address("fma_loop")
        team_address = engine.get_function_address("fma_team") if pooled else 0
    function = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)(loop_address)
    team_function = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int32)(team_address) if pooled else None

    def loop(iterations: int, a: float, b: float, engine: Any = engine) -> float:  # the engine lives with it
        return function(iterations, a, b)

    def team(iterations: int, threads: int, engine: Any = engine) -> None:
        team_function(iterations, threads)

    return loop, team if pooled else None, accumulators * isa.width * (2 if isa.fma else 1)


# `void fma_team(i64 n, i32 threads)`: `fma_loop(n, 1, 1e-7)` on each thread of an OpenMP team of
# `threads` (libgomp's `GOMP_parallel`, as the kernels' parallel entry calls it); each thread's result
# goes to a volatile global, so that no loop is dead code.
_FMA_TEAM_IR = """declare void @GOMP_parallel(void (i8*)*, i8*, i32, i32)
@fma_team_sink = internal global float 0.0
define internal void @fma_team_share(i8* %argument) {
entry:
  %slot = bitcast i8* %argument to i64*
  %n = load i64, i64* %slot
  %result = call float @fma_loop(i64 %n, float 1.0, float 0x3E7AD7F2A0000000)
  store volatile float %result, float* @fma_team_sink
  ret void
}
define void @fma_team(i64 %n, i32 %threads) {
entry:
  %slot = alloca i64
  store i64 %n, i64* %slot
  %argument = bitcast i64* %slot to i8*
  call void @GOMP_parallel(void (i8*)* @fma_team_share, i8* %argument, i32 %threads, i32 0)
  ret void
}"""


def _fma_loop_ir(width: int, accumulators: int, fma: bool) -> str:
    """LLVM IR of `float fma_loop(i64 n, float a, float b)`: n iterations of acc[j] = acc[j] * a + b over
    `accumulators` vectors of `width` lanes (FMAs; without FMA, alternately a multiply and an add), every
    accumulator starting from a different constant so that none can be merged with another."""
    vector = f"<{width} x float>"
    intrinsic = f"llvm.fma.v{width}f32"
    lines = [f"declare {vector} @{intrinsic}({vector}, {vector}, {vector})"] if fma else []
    lines += ["define float @fma_loop(i64 %n, float %a, float %b) {", "entry:"]
    for name in ("a", "b"):
        lines += [f"  %{name}0 = insertelement {vector} undef, float %{name}, i32 0",
                  f"  %v{name} = shufflevector {vector} %{name}0, {vector} undef, <{width} x i32> zeroinitializer"]
    lines += ["  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%next, %loop]"]
    for j in range(accumulators):
        lines.append(f"  %acc{j} = phi {vector} [<{', '.join([f'float {j + 1}.0'] * width)}>, %entry], "
                     f"[%new{j}, %loop]")
    for j in range(accumulators):
        if fma:
            lines.append(f"  %new{j} = call {vector} @{intrinsic}({vector} %acc{j}, {vector} %va, {vector} %vb)")
        else:
            lines.append(f"  %new{j} = fmul {vector} %acc{j}, %va" if j % 2 else
                         f"  %new{j} = fadd {vector} %acc{j}, %vb")
    lines += ["  %next = add i64 %i, 1", "  %done = icmp sge i64 %next, %n",
              "  br i1 %done, label %exit, label %loop", "exit:", f"  %sum0 = fadd {vector} %new0, %new0"]
    lines += [f"  %sum{j} = fadd {vector} %sum{j - 1}, %new{j}" for j in range(1, accumulators)]
    lines += [f"  %result = extractelement {vector} %sum{accumulators - 1}, i32 0", "  ret float %result", "}"]
    return "\n".join(lines)


KERNEL_BENCHMARK = (96, 192)  # M, N of the micro-kernel benchmark: whole register tiles of every default


def kernel_benchmark_module(repeat: int = 400, k: int = 128, m: int = KERNEL_BENCHMARK[0],
                            n: int = KERNEL_BENCHMARK[1]) -> Module:
    """`repeat` GEMMs of `m` x `n` x `k` on local buffers (zeroed once, no copies): the micro-kernel's rate."""
    from swauto.ir.expr import Const
    from swauto.ir.nodes import Access, LocalBuffer, Seq, Zero, gemm_call

    def box(name: str, extents: tuple[int, int], dims: str) -> Access:
        return Access(name, (Const(0), Const(0)), extents, tuple(dims))

    a, b, c = box("A", (m, k), "MK"), box("B", (k, n), "KN"), box("C", (m, n), "MN")
    return Module("kernel_rate", (), (LocalBuffer("A", (m, k)), LocalBuffer("B", (k, n)), LocalBuffer("C", (m, n))),
                  Seq((Zero(a), Zero(b), Zero(c),
                       For("r", Const(0), Const(repeat), 1, gemm_call(m, n, k, a, b, c, "N")))))


def map_benchmark_module(size: int, repeat: int) -> Module:
    """`repeat` element-wise additions `Z = X + Y` of three local buffers of `size` bytes together
    (zeroed once, no copies): what a vectorized map moves on tiles in the cache level they fit."""
    from swauto.ir.expr import Const
    from swauto.ir.nodes import Access, LocalBuffer, Zero

    n = size // 3 // 4
    boxes = {role: Access(role, (Const(0),), (n,), ("N",)) for role in ("X", "Y", "Z")}
    add = Call("add", (("N", n),), tuple(boxes.items()))
    return Module("map_rate", (), tuple(LocalBuffer(role, (n,)) for role in boxes),
                  Seq((*(Zero(box) for box in boxes.values()), For("r", Const(0), Const(repeat), 1, add))))


def _panel_bandwidths(l2: int, l3: int, rate: Mapping[str, float]) -> dict[str, float]:
    """`l2_panel_bandwidth` and `l3_panel_bandwidth`: the bytes per second of a vector panel the micro-kernel
    streams in from L2 (a panel of a quarter of it) and from L3 (of twice the L2, within a quarter of the
    L3), each row tile reading it once: the tile of the default tile's vectors with the fewest rows whose
    accumulators hide the FMA latency (most bytes per FMA: the stream, not the FMAs, is what the time tells);
    and `overlap_exponent`, from the same stream out of L2 in tiles of more rows, up to twice as many and
    more (the FMAs are the longer there), timed in the same rounds: the p of the p-norm (`overlapped`) that
    best gives their K steps' times from their FMAs' (`k_step_seconds`, at `rate`) and the stream's, in the
    least squares of the logarithms. Each time the best of interleaved runs of about 32 MB streamed. On an
    Emerald Rapids core, tiles of 4 - 10 rows x 2 vectors took 1.2 - 1.75 times the longer of the two (p
    about 2), 2 - 6 rows x 4 vectors 1.36 - 1.56."""
    from swauto.backends.host import compile_module
    from swauto.backends.host.isa import select
    from swauto.backends.host.knobs import Knobs

    isa = select()
    _, vectors = _default_tile()
    least = max(1, math.ceil(rate["latency_accumulators"] / vectors))
    tiles = [Knobs(rows, vectors) for rows in range(least, 2 * least + 3) if Knobs(rows, vectors).fits(isa)]
    n = KERNEL_BENCHMARK[1]

    def programs(panel: int, timed: Sequence[Knobs]) -> tuple[int, list[Callable[[], object]]]:
        """K steps per call of each column tile, and a call of each of `timed` streaming a `panel`."""
        k = max(8, panel // (4 * n))
        repeat = max(2, (32 << 20) // (4 * k * n))
        compiled = [compile_module(kernel_benchmark_module(repeat=repeat, k=k, m=tile.rows, n=n), knobs=tile)
                    for tile in timed]
        return repeat * k, [lambda p=program: p.run({}, threads=1) for program in compiled]

    l2_steps, l2_runs = programs(l2 // 4, tiles)
    l3_steps, (l3_run,) = programs(min(2 * l2, l3 // 4), tiles[:1])
    seconds = _interleaved_best(l2_runs, runs=3)
    l2_rate = l2_steps * 4 * n / seconds[0]
    # A panel out of L3 never streams faster than one out of L2 (a disturbed reading could say so).
    l3_rate = min(l3_steps * 4 * n / _best_seconds(l3_run), l2_rate)
    column_tiles = -(-n // (isa.width * vectors))
    stream = 4 * isa.width * vectors / l2_rate  # one K step's panel vectors
    points = [(k_step_seconds(tile.rows, vectors, isa.width, rate["kernel_flops"], rate["latency_accumulators"],
                              rate["load_slots"]), stream, time_taken / (l2_steps * column_tiles))
              for tile, time_taken in zip(tiles[1:], seconds[1:], strict=True)]
    return {"l2_panel_bandwidth": l2_rate, "l3_panel_bandwidth": l3_rate, "overlap_exponent": fitted_exponent(points)}


OVERLAP_EXPONENTS = tuple(2 ** (i / 16) for i in range(97))  # 1 to 64, 16 a doubling


def fitted_exponent(points: Sequence[tuple[float, float, float]]) -> float:
    """Of `OVERLAP_EXPONENTS`, the p whose p-norm (`overlapped`) of each point's two times (FMAs, stream)
    gives its third (the K step measured) best, in the least squares of the logarithms; the largest (the
    longer time hides the shorter) without points."""
    def misfit(exponent: float) -> float:
        return sum(math.log(overlapped(fmas, stream, exponent) / step) ** 2 for fmas, stream, step in points)

    return min(OVERLAP_EXPONENTS, key=misfit) if points else OVERLAP_EXPONENTS[-1]


def _map_bandwidth(size: int) -> float:
    """The operand bytes per second of `map_benchmark_module` on tiles of `size` bytes together, the
    best of several runs of about 32 MB moved."""
    run, touched = _map_run(size)
    return touched / _best_seconds(run)


def _map_run(size: int) -> tuple[Callable[[], object], int]:
    """A run of `map_benchmark_module` on tiles of `size` bytes together, repeated for about 32 MB moved,
    and the operand bytes it touches."""
    from swauto.backends.host import compile_module

    repeat = max(4, (32 << 20) // size)
    module = map_benchmark_module(size, repeat)
    program = compile_module(module)
    return (lambda: program.run({}, threads=1)), repeat * sum(4 * prod(buffer.shape) for buffer in module.buffers)


def transpose_module(side: int, repeat: int) -> Module:
    """`repeat` transfers of a `side` x `side` tensor into a buffer a GEMM then reads as its vector operand
    along the tensor's rows (C[N = 1, M] += T[M, K] x B[K, N]: the micro-kernel vectorizes M), so the
    backend packs the rows into micro-panels: a transposing copy, as the model prices one."""
    from swauto.ir.nodes import DmaWait, LocalBuffer, gemm_call

    def box(name: str, extents: tuple[int, int], dims: str) -> Access:
        return Access(name, (ex.Const(0), ex.Const(0)), extents, tuple(dims))

    tile = box("T", (side, side), "MK")
    get = Dma("get", box("X", (side, side), "MK"), tile, "x")
    return Module("transpose_rate", (Tensor("X", (side, side)),),
                  (LocalBuffer("T", (side, side)), LocalBuffer("B", (side, 1)), LocalBuffer("C", (1, side))),
                  Seq((Zero(box("B", (side, 1), "KN")), Zero(box("C", (1, side), "NM")),
                       For("r", ex.Const(0), ex.Const(repeat), 1, Seq((get, DmaWait("x")))),
                       gemm_call(side, 1, side, tile, box("B", (side, 1), "KN"), box("C", (1, side), "NM")))))


def _transpose_bandwidth(size: int) -> float:
    """Bytes per second the backend's transposing copy (`transpose_module`) moves from a square tensor of
    `size` bytes into micro-panels (one thread): the difference of two repeat counts, which takes out the
    GEMM that makes the copy a packing one."""
    from swauto.backends.host import compile_module

    side = int((size // 4) ** 0.5)
    repeat = max(2, (16 << 20) // size)
    arrays = {"X": np.ones((side, side), np.float32)}
    programs = [compile_module(transpose_module(side, count)) for count in (repeat, 2 * repeat)]
    once, twice = _interleaved_best([lambda p=p: p.run(arrays, threads=1) for p in programs], runs=3)
    # A disturbed reading that leaves no difference: the first module's time, its GEMM counted as copying.
    return repeat * size / (twice - once if twice > once else once)


def _l3_reach(array: int, l3: int, l3_rate: float, dram_rate: float) -> int:
    """The most bytes (a copy's source and target together, up to half the L3) that copy nearer the L3's
    rate (`l3_rate`, measured on arrays of `array` bytes) than DRAM's: arrays doubled until their copy
    falls to the middle. Here (a 260 MB L3, shared with other machines' cores): 11.6 GB/s at 16 MB arrays,
    5.1 - 5.5 from 32 to 256 MB (the reach came out 16 or 32 MB in three calibrations), where the L3's
    size alone had said 130 MB."""
    reach = 2 * array
    while 2 * reach <= l3 // 2 and _copy_bandwidth(reach) > (l3_rate + dram_rate) / 2:
        reach *= 2
    return min(reach, l3 // 2)


def _copy_bandwidth(size: int, threads: int = 1) -> float:
    """Bytes per second copied from one array of `size` bytes to another (per thread, summed), with the
    ordinary stores generated code makes: NumPy's own copy calls memcpy, whose non-temporal stores on
    arrays of more than about half the L3 ran twice as fast here beyond the L3 (10 GB/s against 5.3)."""
    from concurrent.futures import ThreadPoolExecutor

    sources = [np.ones(size // 4, np.float32) for _ in range(threads)]
    targets = [np.empty_like(source) for source in sources]
    repeat = max(1, (64 << 20) // size)
    zero = np.float32(0)

    def copy(index: int) -> None:
        for _ in range(repeat):
            np.add(sources[index], zero, out=targets[index])

    if threads == 1:
        seconds = _best_seconds(lambda: copy(0))
    else:
        with ThreadPoolExecutor(threads) as pool:
            seconds = _best_seconds(lambda: list(pool.map(copy, range(threads))))
    return threads * repeat * size / seconds


# Wide FMAs start at about half speed on some cores (seen here: about 80 GFLOPS for the first 30 ms, then 140 - 170):
# a measurement of them starts after this long of them.
WARM_UP_SECONDS = 0.05


def _warm_up(function: Callable[[], object]) -> None:
    """Call `function` for `WARM_UP_SECONDS`."""
    until = time.perf_counter() + WARM_UP_SECONDS
    while time.perf_counter() < until:
        function()


def _interleaved_best(functions: Sequence[Callable[[], object]], runs: int, rounds: int = 3) -> list[float]:
    """Each function's `_best_seconds` over `rounds` rounds that run them all in turn: a slow moment of
    the machine slows each of them for a while, not one for all of its runs."""
    best = [float("inf")] * len(functions)
    for _ in range(rounds):
        for index, function in enumerate(functions):
            best[index] = min(best[index], _best_seconds(function, runs))
    return best


def _best_seconds(function, runs: int = 7) -> float:
    """The shortest of `runs` timed calls of `function` (after one untimed): a run another process
    interrupted is longer, never shorter, than the machine's own time. While calibrating, the runs start
    once the core reads quiet, and are run again (up to `CALIBRATION_ATTEMPTS` times in all) where it no
    longer does after them."""
    function()
    best = float("inf")
    for _ in range(CALIBRATION_ATTEMPTS):
        waited = _gate.wait()
        for _ in range(runs):
            started = time.perf_counter()
            function()
            best = min(best, time.perf_counter() - started)
        if not waited or _gate.quiet():
            break
    return best
