"""Physical layouts: where each element of a tensor or local buffer lives in memory.

Tensors are row-major, as the IR says. Local buffers are the host backend's to place (DMA lowering and
GEMM lowering both read the layout from here, so they agree): a buffer a GEMM reads as its vector
operand is *packed* in micro-panels (the packed dimension split by the micro-kernel's width, the panel
index outermost, K next, the panel's lanes innermost), so the micro-kernel streams it contiguously.
The broadcast operand is not packed: its rows stream as well in place, and packing it would be a
transposing copy. When the tensors are cache-resident (or beyond the L3, where calibration measured
views faster there: `Knobs.dram_views`), a buffer that would hold a plain copy of one tensor box is a
*view* of the tensor in place, its DMAs mere pointer moves (no copy of C tiles in and out, a C tile the
calls overwrite written where it lies, no copy of the broadcast operand), unless a GEMM's C tile would
have its lanes apart there, or its register tiles' rows in a few L1 sets where
calibration found such tiles faster copied, or a broadcast operand's K steps would be a multiple of
512 bytes apart (lines in a few L1 sets), or a box the GEMMs come back to (broadcast rows each column tile
reads again, a C tile several calls accumulate into) would put more lines in one L2 set than it has ways.
The others are row-major with the rows padded off multiples of 512 bytes, which keeps strided rows from
sharing L1 sets.

A zero-filled get whose box may reach outside its tensor (a tile of a padded input at the image's
edge) is a view too where only maps and reductions read it: they take 0 for the elements outside
(`clipped_axes`, `primitives.emit_map`), so no copy is made. MobileNetV2 block2.1.depthwise at B = 8
on an Emerald Rapids: the model's pick ran 1.36 ms in place against 1.82 ms for the former pick, which
copied the padded image (one thread, in turns, medians of 7 x 10 calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from math import gcd, prod

import numpy as np

from swauto.ir.analysis import trip_count
from swauto.ir.dependence import value_ranges
from swauto.ir.expr import Const, bounds, free_vars, linear_form
from swauto.ir.nodes import Access, Call, Dma, For, Let, Module, Seq, Stmt, Zero
from swauto.ir.visitor import walk

from .knobs import Knobs

CACHE_LINE_BYTES = 64
ALIGN_ELEMENTS = CACHE_LINE_BYTES // 4  # float32s: every buffer starts on a cache line
# Rows a multiple of 512 bytes apart share an eighth of the L1's sets (or fewer): a padded row moves them off.
SET_ALIASING_ELEMENTS = 128
# A register tile's rows of C (6 on a Zen 3) a multiple of 2 KiB apart share two groups of L1 sets or one.
OUTPUT_SET_ALIASING_ELEMENTS = 512


@dataclass(frozen=True)
class AxisLayout:
    """Where index `i` of one logical axis goes: `i` splits in mixed radix over `extents` (outermost
    first), and digit `d` moves `strides[d]` elements. One sub-axis is a plain strided axis."""

    extents: tuple[int, ...]
    strides: tuple[int, ...]

    def offset(self, index: int) -> int:
        """Elements from the array's start to logical index `index` of this axis."""
        total = 0
        for extent, stride in zip(reversed(self.extents), reversed(self.strides), strict=True):
            total += (index % extent) * stride
            index //= extent
        return total


@dataclass(frozen=True)
class Layout:
    """The placement of a logical row-major array: one `AxisLayout` per axis, `size` elements to allocate."""

    axes: tuple[AxisLayout, ...]
    size: int

    def offset(self, index: tuple[int, ...]) -> int:
        return sum(axis.offset(i) for axis, i in zip(self.axes, index, strict=True))


def row_major(shape: tuple[int, ...], pad: bool = False) -> Layout:
    """C order; with `pad`, a last axis of a multiple of 128 floats (512 bytes) gets 16 more per row."""
    strides = []
    stride = 1
    for axis, extent in reversed(list(enumerate(shape))):
        strides.append(stride)
        stride *= extent + (ALIGN_ELEMENTS if pad and axis == len(shape) - 1 and len(shape) > 1
                            and extent % SET_ALIASING_ELEMENTS == 0 else 0)
    strides.reverse()
    return Layout(tuple(AxisLayout((extent,), (s,)) for extent, s in zip(shape, strides, strict=True)),
                  max(stride, 1))


def innermost_axis(access: Access) -> int | None:
    """The innermost axis of `access` longer than 1 (None if there is none)."""
    return max((axis for axis, extent in enumerate(access.padded_extents()) if extent > 1), default=None)


def innermost_dim(access: Access) -> str | None:
    """The dimension carried by the innermost axis of `access` longer than 1 (None if there is none)."""
    axis = innermost_axis(access)
    return None if axis is None else access.dims[axis]


def vector_dim(gemm: Call) -> str:
    """The dimension the host micro-kernel vectorizes: the one C's innermost axis longer than 1
    carries (C is row-major, so its vectors are contiguous); the other free dimension is broadcast."""
    dim = innermost_dim(gemm.operand("C"))
    return dim if dim in ("M", "N") else "N"


def whole_vectors(gemm: Call, knobs: Knobs, width: int, shapes: Mapping[str, tuple[int, ...]] | None = None) -> bool:
    """True when the micro-kernel (register tile `knobs`, vectors of `width` lanes) loads whole vectors
    of the vector operand and of C: the operand is packed, or its innermost axis longer than 1 carries
    the vectorized dimension; and in both that axis holds the dimension whole or in runs of whole
    vectors (B = 8 innermost under 8 columns: runs of 8 lanes, which the micro-kernel multiplies one
    lane at a time). With the arrays' `shapes`, C's axis must also be the innermost of its array
    longer than 1 (a C tile of an NCHW row, [64 channels, 56 columns], vectorizing the channels: lanes
    56 apart). Otherwise every lane is loaded and multiplied alone."""
    dim, access = gemm_roles(gemm)["vector"]
    size = int(dict(gemm.sizes)[dim])

    def runs_whole(box: Access) -> bool:
        axis = innermost_axis(box)
        if axis is None or box.dims[axis] != dim:
            return False
        extent = box.padded_extents()[axis]
        return extent >= size or extent % width == 0

    def innermost_in_array(box: Access) -> bool:  # (runs_whole holds: the axis exists)
        shape = (shapes or {}).get(box.name)
        return shape is None or all(extent == 1 for extent in shape[innermost_axis(box) + 1:])

    packed = _packing(access, dim, knobs, width) is not None
    output = gemm.operand("C")
    return (packed or runs_whole(access)) and runs_whole(output) and innermost_in_array(output)


def gemm_roles(gemm: Call) -> dict[str, tuple[str, Access]]:
    """The micro-kernel's view of a GEMM: 'vector' (the operand carrying the vectorized dimension and
    K), 'broadcast' (the other input) and 'C', each with the dimension it is packed along."""
    v = vector_dim(gemm)
    u = "N" if v == "M" else "M"
    a, b = gemm.operand("A"), gemm.operand("B")
    vector, broadcast = (b, a) if v == "N" else (a, b)
    return {"vector": (v, vector), "broadcast": (u, broadcast), "C": (u, gemm.operand("C"))}


def plan(module: Module, knobs: Knobs, width: int, ignored: frozenset[str], views_allowed: bool,
         l2: tuple[int, int] | None = None, l1: tuple[int, int] | None = None
         ) -> tuple[dict[str, Layout], dict[str, str]]:
    """A layout for every buffer of `module` not in `ignored`, and for every tensor (row-major); and
    the buffers that are views, each with the tensor it shows.

    A buffer is packed when every GEMM that reads it uses it as the vector operand, through the same single
    axis for the packed dimension, at a start that is always a multiple of the same panel (`_packing`): then
    the micro-kernel's offsets are a run-time base plus compile-time constants; unless the micro-kernel reads
    each of its elements once per transfer, in whole vectors in place (`read_in_place`). Else, when tiles may be
    held in place (`views_allowed`: the tensors stay in cache, or calibration measured views faster beyond
    the L3, `Knobs.dram_views`: `codegen.in_place_allowed`), it is a view if `_view` allows (in cache, 109
    against 90 GFLOPS for GEMM 4096 x 64 x 64 on a Zen 3), a GEMM's C tile whose register tiles' rows share
    L1 sets there only with `knobs.output_views` (`_output_rows_share_sets`: on a Zen 3, copies of such C
    tiles, rows 4 KiB apart, ran GEMMs 2 - 17% faster than views), and not a box GEMMs come back to
    (`_returning_boxes`) that an L2 of `l2` (bytes, ways) cannot hold in its sets (`_rows_overflow_l2_sets`),
    nor broadcast rows whose register tile of `knobs.rows` rows puts more lines in one set of an L1 of `l1`
    than it has ways (`_tile_rows_overflow_l1_sets`). Else it is row-major (padded).
    """
    uses = _uses(module, knobs, width)
    moves = _moves(module)
    kept = _kept_for_several_calls(module) if views_allowed else {"vector": set(), "C": set()}
    in_place = read_in_place(module, knobs, width, views_allowed, uses, moves, kept)
    layouts = {tensor.name: row_major(tensor.shape) for tensor in module.tensors}
    views: dict[str, str] = {}
    returning = _returning_boxes(knobs, width, moves, kept["C"]) if views_allowed and l2 is not None else {}
    for buffer in module.buffers:
        if buffer.name in ignored:
            continue
        use = uses.get(buffer.name, set())
        if buffer.name not in in_place and len(use) == 1 and (only := next(iter(use)))[0] == "vector" \
                and only[1] is not None:
            _, axis, panel = only
            layouts[buffer.name] = packed(buffer.shape, axis, panel, _k_axes(module, buffer.name))
        elif views_allowed and (view := _view(module, buffer.name, buffer.shape, moves)) is not None \
                and _lanes_contiguous(accumulating := moves.gemms.get(buffer.name, ()), view[1]) \
                and (knobs.output_views or not _output_rows_share_sets(accumulating, view[1])) \
                and not _broadcast_rows_share_sets(broadcasts := moves.broadcasts.get(buffer.name, ()), view[1]) \
                and not _tile_rows_overflow_l1_sets(broadcasts, view[1], knobs.rows, l1) \
                and not _rows_overflow_l2_sets(returning.get(buffer.name, ()), view[1], l2):
            views[buffer.name], layouts[buffer.name] = view[0], view[1]
        else:
            layouts[buffer.name] = row_major(buffer.shape, pad=True)
    return layouts, views


_Uses = dict[str, set[tuple[str, int | None, int]]]


def _uses(module: Module, knobs: Knobs, width: int) -> _Uses:
    """Per buffer, how the calls read it: (role, the axis a GEMM's vector operand could be packed along
    or None, the panel width or 0), 'map' for maps and reductions."""
    uses: _Uses = {}
    for node, _ in walk(module.body):
        if not isinstance(node, Call):
            continue
        if node.signature.kind != "gemm":  # a map or reduction reads its buffers in place, row-major
            for _, access in node.operands:
                uses.setdefault(access.name, set()).add(("map", None, 0))
            continue
        for role, (dim, access) in gemm_roles(node).items():
            packing = _packing(access, dim, knobs, width) if role == "vector" else None
            uses.setdefault(access.name, set()).add((role, *(packing or (None, 0))))
    return uses


def read_in_place(module: Module, knobs: Knobs, width: int, views_allowed: bool, uses: _Uses | None = None,
                  moves: _Moves | None = None, kept: Mapping[str, set[str]] | None = None) -> frozenset[str]:
    """The vector operands `plan` could pack that it leaves in place as views, because packing would not
    pay (every GEMM reading them has `one_row_tile`, and no tile is kept for several calls) and their lanes
    are contiguous in the tensor: their transfers copy nothing (the host model charges the micro-kernel's
    one read of them)."""
    if not views_allowed:
        return frozenset()
    uses = _uses(module, knobs, width) if uses is None else uses
    moves = _moves(module) if moves is None else moves
    reread = {gemm_roles(node)["vector"][1].name for node, _ in walk(module.body)
              if isinstance(node, Call) and node.signature.kind == "gemm" and not one_row_tile(node, knobs)}
    reread |= (_kept_for_several_calls(module) if kept is None else kept)["vector"]
    found = set()
    for buffer in module.buffers:
        use = uses.get(buffer.name, set())
        if buffer.name not in reread and len(use) == 1 and (only := next(iter(use)))[0] == "vector" \
                and only[1] is not None:
            view = _view(module, buffer.name, buffer.shape, moves)
            if view is not None and view[1].axes[only[1]].strides == (1,):  # whole vectors in place
                found.add(buffer.name)
    return frozenset(found)


def _kept_for_several_calls(module: Module) -> dict[str, set[str]]:
    """Per role of a GEMM's operand ("vector", "C"), the buffers GEMMs use in it more often than transfers
    fill them: a tile kept for several calls. In place, a vector operand's rows are a tensor's rows apart,
    which the caches keep badly; packed, it is one block (ResNet-50 res5_1x1b at B = 1: a 512 x 256 weight
    tile rows 8 KiB apart, read by 14 calls of 4 pixels each, 2.2-2.7 ms in place, where its 112 calls alone
    take 0.73 ms on a packed panel)."""
    gets: Counter[str] = Counter()
    uses: dict[str, Counter[str]] = {"vector": Counter(), "C": Counter()}
    try:
        for node, loops in walk(module.body):
            if isinstance(node, Dma) and node.direction == "get":
                gets[node.buffer.name] += prod(trip_count(loop) for loop in loops)
            elif isinstance(node, Call) and node.signature.kind == "gemm":
                roles, trips = gemm_roles(node), prod(trip_count(loop) for loop in loops)
                for role, counts in uses.items():
                    counts[roles[role][1].name] += trips
    except (KeyError, ValueError):  # loop bounds that vary: every tile taken as used again
        gemms = [node for node, _ in walk(module.body) if isinstance(node, Call) and node.signature.kind == "gemm"]
        return {role: {gemm_roles(gemm)[role][1].name for gemm in gemms} for role in uses}
    return {role: {name for name, count in counts.items() if count > gets[name]} for role, counts in uses.items()}


def one_row_tile(gemm: Call, knobs: Knobs) -> bool:
    """Whether the micro-kernel covers `gemm`'s broadcast dimension with one row tile of `knobs`, so it
    reads each element of the vector operand once. Packing that operand then costs as much as the
    multiplication, where its lanes are contiguous in place (GEMM 4 x 512 x 256: 39.6 GFLOPS packed,
    65.5 in place; at 8 rows and more, each element read again, packing pays once the operand's rows
    are 4 KiB apart: 1024^3 at 104.7 packed, 91.6 in place)."""
    return dict(gemm.sizes)[gemm_roles(gemm)["broadcast"][0]] <= knobs.rows


def _lanes_contiguous(gemms: Sequence[Call], layout: Layout) -> bool:
    """Whether every one of `gemms` (those that accumulate into a buffer) finds the lanes of its vectors
    next to each other in the buffer's `layout` (the axis of its C access that carries the vectorized
    dimension has stride 1). A view of an NCHW output tile has its channels' lanes a plane apart: the
    micro-kernel would multiply them one lane at a time (conv2d_nchw at B = 1, one pixel per GEMM: 30 ms),
    where a copy in and out of the 64 channels keeps whole vectors (5 ms)."""
    for gemm in gemms:
        axis = innermost_axis(gemm.operand("C"))
        if axis is not None and layout.axes[axis].strides != (1,):
            return False
    return True


def _output_rows_share_sets(gemms: Sequence[Call], layout: Layout) -> bool:
    """Whether any of `gemms` (those that accumulate into a buffer) finds the rows of its register tiles (C's
    broadcast dimension) a multiple of `OUTPUT_SET_ALIASING_ELEMENTS` apart in the buffer's `layout`: a tile's
    rows then fall in two L1 set groups or fewer. Measured on a Zen 3 in turns, C tiles in place against
    copies: GEMM 128^3 (rows 512 bytes apart) 1.15x as fast, 256^3 (1 KiB) 1.04x, 4096 x 64 x 64 (256 bytes)
    1.23x; 512^3 (2 KiB) 0.92x, 1024^3 (4 KiB) 0.98x, 128 x 4096 x 512 (16 KiB) 0.92x. Such tiles are views
    only where calibration measured views of them as fast as copies (`Knobs.output_views`)."""
    return any(_steps_a_multiple_apart(access, u, layout, OUTPUT_SET_ALIASING_ELEMENTS)
               for u, access in (gemm_roles(gemm)["C"] for gemm in gemms))


def _broadcast_rows_share_sets(accesses: Sequence[Access], layout: Layout) -> bool:
    """Whether any of `accesses` (GEMMs' broadcast operands in one buffer) steps K a multiple of
    `SET_ALIASING_ELEMENTS` apart in the buffer's `layout` (along its innermost K axis longer than 1): each
    K step's few broadcast elements on a line of their own, all those lines in a few L1 sets, so that
    they are fetched again for every row tile. A view of a convolution's weight [K = 96 channels, N = 256]
    at B = 8 has its rows 1 KiB apart (4 of 64 sets): AlexNet conv2 ran 124 ms on it, 101 on a padded copy."""
    return any(_steps_a_multiple_apart(access, "K", layout, SET_ALIASING_ELEMENTS) for access in accesses)


def _tile_rows_overflow_l1_sets(accesses: Sequence[Access], layout: Layout, rows: int,
                                l1: tuple[int, int] | None) -> bool:
    """Whether a register tile of `rows` rows of any of `accesses` (GEMMs' broadcast operands in a view of
    `layout`) reads, at one K step, more lines in one set of an L1 of `l1` (bytes, ways) than the set holds:
    the rows then evict one another at every K step, and every broadcast comes from L2. The tile's rows
    are its first `rows` indices of the broadcast dimension, innermost axis first. GEMM 1024^3 on a Zen 4
    (L1 of 8 ways, sets 4 KiB apart), calls of 64 x 512 x 1024 reading A's rows in place (4 KiB apart):
    the 14-row tile at 61 - 78 GFLOPS, the 5-row one at 105 - 108; with A's rows 4160 bytes apart (K =
    1040) both at 100 - 102."""
    if l1 is None:
        return False
    size, ways = l1
    strides = tuple(axis.strides[0] for axis in layout.axes)
    for access in accesses:
        extents, left = [1] * len(access.dims), rows
        for axis in reversed(range(len(access.dims))):  # the broadcast dimension's axes, innermost first
            if access.dims[axis] != "K" and left > 1:
                extents[axis] = min(left, access.extents[axis])
                left = -(-left // extents[axis])
        if lines_per_set(tuple(extents), strides, size // ways // CACHE_LINE_BYTES) > ways:
            return True
    return False


def _rows_overflow_l2_sets(accesses: Sequence[Access], layout: Layout, l2: tuple[int, int] | None) -> bool:
    """Whether any of `accesses` (of a view of `layout`) has more of its lines in one set of an L2 of `l2`
    (bytes, ways) than the set holds: a box that comes back then comes back from the L3. Rows a power of
    two apart in a large tensor fall in few sets (its addresses are the physical ones within a huge page,
    which NumPy asks for on large arrays). GEMM 2048^3 on one thread on an Intel Xeon (2 MiB L2 of 16
    ways), in turns: calls of 512 rows x K = 128 x N = 512 with the broadcast rows in place (8 KiB apart,
    32 lines in each set they use, read again by every column tile) ran at 93 - 101 GFLOPS, 126 - 131 with
    the rows 8256 bytes apart, 123 - 128 copied; 256 rows x K = 512 in place (16 lines a set) at 138 - 145.
    Calls of 512 x 128 x 256 accumulating into C tiles in place (32 lines a set, loaded and stored by each
    of 16 calls) ran at 129 - 138 GFLOPS, 143 - 148 with the tiles copied (on two threads 258 against 285)."""
    return l2 is not None and any(box_lines_per_set(access, layout, l2) > l2[1] for access in accesses)


def _returning_boxes(knobs: Knobs, width: int, moves: _Moves, accumulated: set[str]) -> dict[str, list[Access]]:
    """Per buffer, the boxes of it GEMMs come back to from the caches: a broadcast operand's rows each column
    tile of `knobs` reads again (`rereads_rows`), a C tile several calls accumulate into (`accumulated`: each
    loads and stores it)."""
    boxes: dict[str, list[Access]] = {}
    for name, reads in moves.operands.items():
        for call, access in reads:
            if call.signature.kind == "gemm" and gemm_roles(call)["broadcast"][1] is access \
                    and rereads_rows(call, knobs.vectors, width):
                boxes.setdefault(name, []).append(access)
    for name in accumulated:
        boxes.setdefault(name, []).extend(gemm.output for gemm in moves.gemms.get(name, ()))
    return boxes


def rereads_rows(gemm: Call, vectors: int, width: int) -> bool:
    """Whether the micro-kernel reads `gemm`'s broadcast rows again: its vectorized dimension takes more than
    one column tile of `vectors` vectors of `width` lanes, and every column tile reads all the rows."""
    return dict(gemm.sizes)[vector_dim(gemm)] > vectors * width


def box_lines_per_set(access: Access, layout: Layout, l2: tuple[int, int]) -> int:
    """`lines_per_set` of `access`'s box in a buffer of `layout`, in a cache of `l2` (bytes, ways)."""
    size, ways = l2
    return lines_per_set(access.bounding_box().spans(), tuple(axis.strides[0] for axis in layout.axes),
                         size // ways // CACHE_LINE_BYTES)


@cache
def lines_per_set(extents: tuple[int, ...], strides: tuple[int, ...], sets: int) -> int:
    """The most cache lines of a block of float32 `extents` laid out with `strides` (elements) that fall in
    one set of a cache of `sets` sets (line-aligned: the block's first byte on a line's; a line two rows
    share counted for each)."""
    # Rows: the last axis longer than 1 where its elements are contiguous, else single elements.
    axes = [(extent, stride) for extent, stride in zip(extents, strides, strict=True) if extent > 1] or [(1, 1)]
    contiguous = axes[-1][1] == 1
    run = 4 * (axes[-1][0] if contiguous else 1)
    rows = axes[:-1] if contiguous else axes
    starts = np.zeros(1, dtype=np.int64)
    for extent, stride in rows:
        starts = np.add.outer(starts, 4 * stride * np.arange(extent, dtype=np.int64)).ravel()
    first = starts // CACHE_LINE_BYTES
    lines = (starts + run - 1) // CACHE_LINE_BYTES - first + 1
    # Each row's lines wrap around the sets: whole turns add to every set, the rest to a range of them.
    begin, rest = first % sets, lines % sets
    count = np.zeros(sets + 1, dtype=np.int64)
    end = begin + rest
    inside = end <= sets
    np.add.at(count, begin, 1)
    np.add.at(count, np.where(inside, end, sets), -1)
    np.add.at(count, np.zeros(int((~inside).sum()), dtype=np.int64), 1)
    np.add.at(count, end[~inside] - sets, -1)
    return int(np.cumsum(count[:sets]).max() + (lines // sets).sum())


def _steps_a_multiple_apart(access: Access, dim: str, layout: Layout, elements: int) -> bool:
    """Whether `access` steps `dim`, along its innermost axis longer than 1 that carries it, a multiple of
    `elements` apart in `layout` (False where no such axis is)."""
    axes = [a for a, d in enumerate(access.dims) if d == dim and access.extents[a] > 1]
    return bool(axes) and layout.axes[axes[-1]].strides[0] % elements == 0


@dataclass(frozen=True)
class _Moves:
    """What the statements of a module do to its buffers: each one's transfers, the buffers zeroed and
    written by a call, the GEMMs that accumulate into each and the GEMMs' reads of each as their broadcast
    operand, how many calls and zeroings write each, the tensors a get reads and the block that holds each
    put (by the put's id) (one walk, read by `plan` for every buffer)."""

    dmas: Mapping[str, tuple[Dma, ...]]
    zeroed: frozenset[str]
    written: frozenset[str]
    gemms: Mapping[str, tuple[Call, ...]]
    broadcasts: Mapping[str, tuple[Access, ...]]
    writes: Mapping[str, int]
    read: frozenset[str]
    blocks: Mapping[int, Seq]
    operands: Mapping[str, tuple[tuple[Call, Access], ...]]  # each buffer's reads as an input of a call
    leaving: Mapping[str, frozenset[int]]  # the axes along which a zero-filled get of the buffer may leave its tensor


def _moves(module: Module) -> _Moves:
    dmas: dict[str, list[Dma]] = {}
    gemms: dict[str, list[Call]] = {}
    broadcasts: dict[str, list[Access]] = {}
    writes: Counter[str] = Counter()
    blocks: dict[int, Seq] = {}
    operands: dict[str, list[tuple[Call, Access]]] = {}
    leaving: dict[str, set[int]] = {}
    zeroed, written, read = set(), set(), set()
    for node, loops in walk(module.body):
        if isinstance(node, Seq):
            blocks.update((id(child), node) for child in node.stmts
                          if isinstance(child, Dma) and child.direction == "put")
        elif isinstance(node, Dma):
            dmas.setdefault(node.buffer.name, []).append(node)
            if node.direction == "get":
                read.add(node.tensor.name)
            if node.zero_fill:
                leaving.setdefault(node.buffer.name, set()).update(_leaving_axes(module, node.tensor, loops))
        elif isinstance(node, Zero):
            zeroed.add(node.buffer.name)
            writes[node.buffer.name] += 1
        elif isinstance(node, Call):
            written.add(node.output.name)
            writes[node.output.name] += 1
            for role, access in node.operands:
                if role != node.output_role:
                    operands.setdefault(access.name, []).append((node, access))
            if node.signature.kind == "gemm":
                gemms.setdefault(node.output.name, []).append(node)
                broadcast = gemm_roles(node)["broadcast"][1]
                broadcasts.setdefault(broadcast.name, []).append(broadcast)
    return _Moves({name: tuple(nodes) for name, nodes in dmas.items()}, frozenset(zeroed), frozenset(written),
                  {name: tuple(nodes) for name, nodes in gemms.items()},
                  {name: tuple(accesses) for name, accesses in broadcasts.items()}, writes, frozenset(read), blocks,
                  {name: tuple(uses) for name, uses in operands.items()},
                  {name: frozenset(axes) for name, axes in leaving.items()})


def _leaving_axes(module: Module, box: Access, loops: Sequence[For]) -> set[int]:
    """The axes along which `box` (of a tensor, moved by a zero-filled get inside `loops`) may reach
    outside the tensor for some value of the loops' and the module's variables: every axis where that is
    not bounded."""
    ranges = {**{name: (first, last) for name, first, last in module.context}, **value_ranges(loops)}
    size = module.tensor(box.name).shape
    leaving = set()
    for axis, (start, span) in enumerate(zip(box.starts, box.spans(), strict=True)):
        try:
            first, last = bounds(start, ranges)
        except (KeyError, ValueError, ArithmeticError):
            leaving.add(axis)
            continue
        if not isinstance(span, int) or first < 0 or last + span > size[box.walked(axis)]:
            leaving.add(axis)
    return leaving


def _view(module: Module, buffer: str, shape: tuple[int, ...], moves: _Moves) -> tuple[str, Layout] | None:
    """(tensor, layout) when `buffer` can be a view of a tensor box instead of a copy: every DMA of it
    moves the whole buffer from or to one and the same box of one tensor, an axis of the box for each of
    the tensor's (no window walking one), with the same extents in the same order once 1-long axes are
    dropped; inside the tensor, or else read by maps that clip it (`_read_clipped`); and data flows one
    way: it is read-only (one or more gets of an input), a get and a put of the same box (a C tile;
    nothing zeroes it), or a GEMM's C tile written (perhaps zeroed first) and put once where it may be
    written in place unseen (`written_view_start`: an output tile the calls overwrite, pointed at its
    box before its first write). Not a map's output tile alone: a depthwise convolution's, accumulated
    tap by tap, ran 0.64 - 0.9x as fast in place at stride 2 (MobileNetV2 block2.0 and block3.0 at
    B = 1). Its layout gives each axis the stride of the tensor axis it pairs with."""
    dmas = moves.dmas.get(buffer, ())
    if not dmas:
        return None
    box = dmas[0].tensor
    whole = tuple(Const(0) for _ in shape)
    for dma in dmas:
        if dma.tensor != box or dma.buffer.starts != whole or dma.buffer.extents != shape \
                or dma.tensor.steps or dma.tensor.walks:
            return None
    if moves.leaving.get(buffer) and not _read_clipped(buffer, shape, box, moves):
        return None
    tensor = module.tensor(box.name)
    gets = sum(dma.direction == "get" for dma in dmas)
    puts = len(dmas) - gets
    written = buffer in moves.written
    if written and (gets, puts) == (0, 1):
        if buffer not in moves.gemms or not _written_in_place(dmas[0], moves):
            return None
    elif buffer in moves.zeroed or written and (gets, puts) != (1, 1) or not written and (puts or tensor.is_output):
        return None
    tensor_axes = [a for a, extent in enumerate(box.extents) if extent > 1]
    buffer_axes = [b for b, extent in enumerate(shape) if extent > 1]
    if [box.extents[a] for a in tensor_axes] != [shape[b] for b in buffer_axes]:
        return None
    source = row_major(tensor.shape)
    strides = dict(zip(buffer_axes, (source.axes[a].strides[0] for a in tensor_axes), strict=True))
    return tensor.name, Layout(tuple(AxisLayout((extent,), (strides.get(b, 0),)) for b, extent in enumerate(shape)),
                               0)


def _read_clipped(buffer: str, shape: tuple[int, ...], box: Access, moves: _Moves) -> bool:
    """Whether `buffer`, filled by zero-filled gets of `box` that may leave its tensor along the axes
    `moves.leaving` names, can be a view that its readers clip instead (`clipped_axes`): gets alone fill
    it, the box has its shape (axis for axis), and only maps and reductions read it, none along its
    innermost dimension over a leaving axis (in the code they run, a point's validity then holds for
    the whole innermost loop, whose vectors stay whole)."""
    leaving = moves.leaving[buffer]
    if any(dma.direction != "get" for dma in moves.dmas[buffer]) or tuple(box.extents) != shape:
        return False
    for call, access in moves.operands.get(buffer, ()):
        signature = call.signature
        if signature.kind not in ("map", "reduce") or any(access.dims[axis] == signature.dims[-1] for axis in leaving):
            return False
    return True


def clipped_axes(module: Module, views: Mapping[str, str]) -> dict[str, tuple[int, ...]]:
    """The `views` (of `plan`) whose gets' boxes may leave their tensor, each with the axes along which
    they may: a zero-filled copy's padding that the maps reading the view make up for, taking 0 for an
    element outside the tensor (`primitives.emit_map`)."""
    leaving = _moves(module).leaving
    return {name: tuple(sorted(leaving[name])) for name in views if leaving.get(name)}


def _written_in_place(put: Dma, moves: _Moves) -> bool:
    """Whether the buffer `put` moves out (written, never got) may be written in place, in the put's box:
    nothing reads that tensor (no get sees the box before the put) and the put has a `written_view_start`
    with every write of the buffer in its block."""
    block = moves.blocks.get(id(put))
    return put.tensor.name not in moves.read and block is not None \
        and written_view_start(block, put, moves.writes[put.buffer.name]) is not None


def written_in_place(body: Stmt, views: Mapping[str, str]) -> frozenset[str]:
    """The `views` (of `plan`) that no transfer in `body` fills: output tiles the calls write in place,
    pointed at their put's box (`written_view_start`) rather than by a get."""
    got = {node.buffer.name for node, _ in walk(body) if isinstance(node, Dma) and node.direction == "get"}
    return frozenset(views.keys() - got)


def written_view_start(block: Seq, put: Dma, writes: int | None = None) -> int | None:
    """Where a buffer written in place (a view `_view` allows without a get) is pointed at the box of its
    `put`, a statement of `block`: the index of the first statement before the put that writes the buffer
    (a call, or a zeroing of it before calls accumulate into it). None unless every write of the buffer in
    `block` (all `writes` of it, when given) is in that statement or the next ones before the put, no other
    transfer between them touches the put's tensor (it would meet the box written early), and the put's
    starts name no variable bound between them (unknown where the view is pointed)."""
    buffer, tensor = put.buffer.name, put.tensor.name
    index = next(i for i, child in enumerate(block.stmts) if child is put)
    counts, touches = [], []
    for child in block.stmts:  # one walk each: the model asks this of every candidate it prices
        count, touched = 0, False
        for node, _ in walk(child):
            if isinstance(node, Call) and node.output.name == buffer or isinstance(node, Zero) \
                    and node.buffer.name == buffer:
                count += 1
            elif isinstance(node, Dma) and node.tensor.name == tensor and node is not put:
                touched = True
        counts.append(count)
        touches.append(touched)
    if not any(counts[:index]) or any(counts[index:]) or writes is not None and sum(counts) != writes:
        return None
    first = next(i for i, count in enumerate(counts) if count)
    bound = {child.var for child in block.stmts[first:index] if isinstance(child, Let)}
    if any(touches[first:index]) or any(free_vars(start) & bound for start in put.tensor.starts):
        return None
    return first


def packed(shape: tuple[int, ...], axis: int, panel: int, k_axes: tuple[int, ...]) -> Layout:
    """Micro-panels: `axis` splits into (panels, `panel`); memory order is the other axes that are not
    K, the panel index, the K axes, then the panel's lanes. The last panel is padded to full size."""
    panels = -(-shape[axis] // panel)
    others = [a for a in range(len(shape)) if a != axis and a not in k_axes]
    # memory order of pieces: (axis, sub) with sub 0 = panel index, 1 = lane, None = a whole axis
    order = [(a, None) for a in others] + [(axis, 0)] + [(a, None) for a in k_axes] + [(axis, 1)]
    extent_of = {(axis, 0): panels, (axis, 1): panel, **{(a, None): shape[a] for a in range(len(shape))}}
    stride_of: dict[tuple[int, int | None], int] = {}
    stride = 1
    for piece in reversed(order):
        stride_of[piece] = stride
        stride *= extent_of[piece]
    axes = tuple(
        AxisLayout((panels, panel), (stride_of[(a, 0)], stride_of[(a, 1)])) if a == axis
        else AxisLayout((shape[a],), (stride_of[(a, None)],))
        for a in range(len(shape))
    )
    return Layout(axes, stride)


def _packing(access: Access, dim: str, knobs: Knobs, width: int) -> tuple[int, int] | None:
    """(axis, panel) when `access` can read a buffer packed in panels along its one axis carrying `dim`:
    the panel is the register tile's columns (`knobs.vectors` x `width` lanes), or the largest divisor
    of them that every start of the axis is a multiple of (a tile of a hoisted buffer starts at a
    loop's multiple of the tile: a panel of 2 vectors for tiles of 32 columns), if it is whole vectors;
    so an element's place is its start's panel plus a constant. None: no axis carries `dim` so."""
    axes = [a for a, d in enumerate(access.dims) if d == dim]
    if len(axes) != 1:
        return None
    form = linear_form(access.starts[axes[0]])
    if form is None:
        return None
    coefficients, constant = form
    panel = gcd(knobs.vectors * width, constant, *coefficients.values())
    return (axes[0], panel) if panel % width == 0 else None


def _k_axes(module: Module, buffer: str) -> tuple[int, ...]:
    """The axes of `buffer` that GEMMs read as K (the same for every use when it is packed)."""
    for node, _ in walk(module.body):
        if isinstance(node, Call):
            for _, access in node.operands:
                if access.name == buffer:
                    return tuple(a for a, d in enumerate(access.dims) if d == "K")
    return ()


def workspace(layouts: dict[str, Layout], buffers: list[str]) -> tuple[dict[str, int], int]:
    """Offsets (in elements, 64-byte aligned, staggered by a cache line so that buffers do not start
    on the same L1 set) of `buffers` inside one per-thread workspace, and its total size."""
    offsets: dict[str, int] = {}
    total = 0
    for index, name in enumerate(buffers):
        offsets[name] = total + (index % 4) * ALIGN_ELEMENTS
        total = offsets[name] + -(-layouts[name].size // ALIGN_ELEMENTS) * ALIGN_ELEMENTS
    return offsets, max(total, ALIGN_ELEMENTS)
