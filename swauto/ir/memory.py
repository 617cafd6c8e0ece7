"""Where the elements of a box live in row-major memory, and the DMA pattern that moves it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod

import numpy as np


@functools.cache
def inverse_axes(axes: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes `axes`: `array.transpose(axes).transpose(inverse_axes(axes))` is
    `array` (NumPy's `argsort` of it, which costs a few microseconds a call through NumPy's dispatch:
    a model's every layer paid it)."""
    return tuple(sorted(range(len(axes)), key=axes.__getitem__))


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-order array of `shape`."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    return tuple(strides)


@dataclass(frozen=True)
class DmaPattern:
    """A box of a row-major array seen as `count` contiguous blocks of `block` elements.

    `stride` is the distance in elements between consecutive blocks' starts when they are evenly
    spaced (one strided DMA), else None (the transfer is a set of strided DMAs, one per outer index).
    """

    block: int
    count: int
    stride: int | None


def walked_strides(shape: tuple[int, ...], walks: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Element strides of the axes of a box of a row-major array of `shape`: the stride of the array
    axis each walks (`Access.walks`; empty: its own)."""
    strides = row_major_strides(shape)
    return tuple(strides[axis] for axis in walks) if walks else strides


def strided_box(shape: tuple[int, ...], extents: tuple[int, ...], steps: tuple[int, ...] = (),
                walks: tuple[int, ...] = ()) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(element strides, extents) of a box of a row-major array of `shape` stepping by `steps` along
    its axes (which walk the array's axes `walks`): each axis's stride times its step. A strided last
    axis is written as rows of one element (a trailing axis of extent 1), so the last axis is always a
    contiguous run."""
    strides = walked_strides(shape, walks)
    if not steps or all(step == 1 for step in steps):
        return strides, extents
    strides = tuple(stride * step for stride, step in zip(strides, steps, strict=True))
    return (strides + (1,), extents + (1,)) if steps[-1] != 1 else (strides, extents)


def merged_rows(shape: tuple[int, ...], extents: tuple[int, ...], steps: tuple[int, ...] = (),
                walks: tuple[int, ...] = ()) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The same box (shape, extents, steps) with the trailing axes it spans entirely merged into
    the axis before them: its rows become its longest contiguous runs. A window (`walks`) is left
    as it is: its rows are counted one per last-axis run."""
    if walks:
        return shape, extents, steps
    axis = len(shape) - 1
    while axis > 0 and extents[axis] == shape[axis] and not (steps and (steps[axis] != 1 or steps[axis - 1] != 1)):
        axis -= 1
    if axis == len(shape) - 1:
        return shape, extents, steps
    inner = prod(shape[axis + 1:])
    return ((*shape[:axis], shape[axis] * inner), (*extents[:axis], extents[axis] * inner),
            (*steps[:axis], 1) if steps else ())


def row_pieces(run: int, rows: int, flat: bool, mesh_columns: int, cpes: int) -> int:
    """Into how many equal blocks the CPEs cut each row of a transfer. The GEMM's mesh layout splits a
    row over the mesh columns when it divides evenly; a data-parallel (`flat`) buffer gives each CPE a
    contiguous share: rows are cut so that there are about as many blocks as CPEs."""
    if not flat:
        return mesh_columns if run % mesh_columns == 0 and run >= mesh_columns else 1
    most = max(1, min(run, cpes // max(rows, 1)))
    return next(p for p in range(most, 0, -1) if run % p == 0)


def block_bytes(shape: tuple[int, ...], extents: tuple[int, ...], element_bytes: int, flat: bool, mesh_columns: int,
                cpes: int, steps: tuple[int, ...] = (), walks: tuple[int, ...] = ()) -> int:
    """The size in bytes of the blocks the CPEs move for a box (all of one size): its rows, or for a
    data-parallel (`flat`) buffer its longest contiguous runs, cut in `row_pieces`."""
    if flat:
        shape, extents, steps = merged_rows(shape, extents, steps, walks)
    _, extents = strided_box(shape, extents, steps, walks)
    run = extents[-1]
    return run // row_pieces(run, prod(extents[:-1]), flat, mesh_columns, cpes) * element_bytes


def dma_pattern(shape: tuple[int, ...], extents: tuple[int, ...], steps: tuple[int, ...] = (),
                walks: tuple[int, ...] = ()) -> DmaPattern:
    """The contiguous blocks of a box with `extents` (stepping by `steps`, walking axes `walks`) inside
    a row-major array of `shape`."""
    strides, extents = strided_box(shape, extents, steps, walks)
    # Merge trailing axes while each continues the run inside it: they form one contiguous block.
    axis = len(extents) - 1
    block = extents[axis]
    axis -= 1
    while axis >= 0 and (extents[axis] == 1 or strides[axis] == block):
        block *= extents[axis]
        axis -= 1
    outer = [(extents[a], strides[a]) for a in range(axis + 1) if extents[a] > 1]
    count = prod(e for e, _ in outer) if outer else 1
    if not outer:
        stride = None
    elif len(outer) == 1:
        stride = outer[0][1]
    else:
        # Several outer axes are evenly spaced only if each is the previous one wrapped exactly.
        even = all(outer[i][1] == outer[i + 1][0] * outer[i + 1][1] for i in range(len(outer) - 1))
        stride = outer[-1][1] if even else None
    return DmaPattern(block, count, stride)


def box_slices(access_starts: tuple[int, ...], extents: tuple[int, ...]) -> tuple[slice, ...]:
    """NumPy slices of a box given its evaluated starts."""
    return tuple(slice(s, s + e) for s, e in zip(access_starts, extents, strict=True))


def dims_view(box: np.ndarray, dims: tuple[str | None, ...], order: tuple[str, ...]) -> np.ndarray:
    """The box with one axis per primitive dimension in `order` (size 1 for one it does not carry):
    point axes dropped, the axes carrying each dimension merged, outermost first (fused loops).

    The result is a view when NumPy can make one, else a copy (callers write results back with
    `store_dims`)."""
    kept = [axis for axis, dim in enumerate(dims) if dim is not None]
    squeezed = box.reshape([box.shape[axis] for axis in kept])
    groups = [[axis for axis in kept if dims[axis] == dim] for dim in order]
    moved = squeezed.transpose([kept.index(axis) for group in groups for axis in group])
    return moved.reshape([prod(box.shape[axis] for axis in group) for group in groups])


def store_dims(box: np.ndarray, dims: tuple[str | None, ...], order: tuple[str, ...], value: np.ndarray) -> None:
    """Write `value` (shaped as `dims_view` gives) into `box` (a view), inverting `dims_view`."""
    target = dims_view(box, dims, order)
    if np.shares_memory(target, box):
        target[...] = value
        return
    # dims_view had to copy: find where each element lives in the box and scatter there.
    where = dims_view(np.arange(box.size).reshape(box.shape), dims, order).ravel()
    box[np.unravel_index(where, box.shape)] = np.broadcast_to(value, target.shape).ravel()


def clip_box(starts: tuple[int, ...], extents: tuple[int, ...], shape: tuple[int, ...],
             steps: tuple[int, ...] = ()) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The part of a box (stepping by `steps`) inside an array of `shape`: per axis, the first index
    of the box inside it (0 when the box starts inside), the array index where that part starts, and
    how many of its indices are inside."""
    first, inside, counts = [], [], []
    for axis, (start, extent, size) in enumerate(zip(starts, extents, shape, strict=True)):
        step = steps[axis] if steps else 1
        low = min(max(-(start // step) if start < 0 else 0, 0), extent)  # ceil(-start / step), clamped
        high = min(max(-((start - size) // step), 0), extent)  # ceil((size - start) / step), clamped
        first.append(low)
        inside.append(start + low * step)
        counts.append(max(high - low, 0))
    return tuple(first), tuple(inside), tuple(counts)


def strided_slices(starts: tuple[int, ...], extents: tuple[int, ...], steps: tuple[int, ...] = ()) -> tuple[slice, ...]:
    """NumPy slices of a box stepping by `steps` given its evaluated starts."""
    if not steps:
        return box_slices(starts, extents)
    return tuple(slice(s, s + (e - 1) * t + 1, t) for s, e, t in zip(starts, extents, steps, strict=True))


def gather_window(array: np.ndarray, starts: tuple[int, ...], extents: tuple[int, ...], steps: tuple[int, ...],
                  walks: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The elements of a window box (`Access.walks`: several axes of the box may walk one axis of
    `array`, whose index there is the sum of theirs) as an array of `extents`, 0 where the box leaves
    `array`, and the mask of the elements inside it."""
    index = [np.zeros((1,) * len(extents), dtype=np.int64) for _ in array.shape]
    for axis, (start, extent) in enumerate(zip(starts, extents, strict=True)):
        shape = [1] * len(extents)
        shape[axis] = extent
        step = steps[axis] if steps else 1
        index[walks[axis]] = index[walks[axis]] + (start + step * np.arange(extent, dtype=np.int64)).reshape(shape)
    inside = np.ones(extents, dtype=bool)
    for walked, size in zip(index, array.shape, strict=True):
        inside &= (walked >= 0) & (walked < size)
    clipped = tuple(np.broadcast_to(np.clip(walked, 0, size - 1), extents)
                    for walked, size in zip(index, array.shape, strict=True))
    return np.where(inside, array[clipped], 0).astype(array.dtype), inside

