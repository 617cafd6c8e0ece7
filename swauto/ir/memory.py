"""Where the elements of a box live in row-major memory, and the DMA pattern that moves it."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


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
