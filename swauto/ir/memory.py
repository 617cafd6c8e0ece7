"""Where the elements of a box live in row-major memory, and the DMA pattern that moves it."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np


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


def dma_pattern(shape: tuple[int, ...], extents: tuple[int, ...]) -> DmaPattern:
    """The contiguous blocks of a box with `extents` inside a row-major array of `shape`."""
    block = 1
    axis = len(shape) - 1
    # Merge trailing axes while the box spans them entirely: they form one contiguous run.
    while axis >= 0:
        block *= extents[axis]
        if extents[axis] != shape[axis]:
            break
        axis -= 1
    outer = [(extents[a], row_major_strides(shape)[a]) for a in range(axis) if extents[a] > 1]
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
