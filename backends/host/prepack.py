"""Constant tiles packed once: which local buffers the host fills from an array of their tiles,
arranged when the constants are bound (`Kernel.prepare`), instead of copying each tile at every call.

A buffer qualifies when every transfer into it is a get of a whole buffer's worth from one constant
tensor (`Tensor.is_constant`: a network's weights), nothing else writes it (no call, no zeroing, no
put), no condition guards its gets, and each get's box depends only on loops of constant bounds around
it. Each such get then has one tile per iteration of those loops (its *key loops*): the tiles are laid
out one after another in the buffer's own layout (packed panels, padded rows), one *section* per get,
in a *prepacked array* the program fills once (its 'prepack' function, the same copies the gets would
make). At a call, a get only points the buffer at its tile there, as a view's get points it at a box
of a tensor: the micro-kernel then reads a tile already in its layout, contiguous, where the copy would
have read the tensor (a 1 x 1 layer's weight at B = 1: a sixth of the call).

Tiles are kept once per iteration of the key loops: tiles holding more than `GROWTH` times their tensor's
elements, and `SLACK` more, are not prepacked. The bound counts the tiles' own elements, not their layout's
padding, so that the host model (which asks which buffers, not where they go) and the backend agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

from swauto.ir.analysis import trip_count
from swauto.ir.expr import Const, free_vars
from swauto.ir.nodes import Call, Dma, For, If, Module, Stmt, Zero
from swauto.ir.visitor import children

from .layout import ALIGN_ELEMENTS, Layout

# A prepacked array may hold at most this many times its tensor's elements, plus SLACK (1 MiB of floats).
GROWTH = 4
SLACK = 1 << 18


@dataclass(frozen=True)
class KeyLoop:
    """A loop whose iterations pick a get's tile: `var` runs from `start` in steps of `stride`, `trips` times."""

    var: str
    start: int
    stride: int
    trips: int


@dataclass(frozen=True)
class Section:
    """The tiles of one get statement, from element `offset` of the prepacked array, tile number the
    mixed-radix index of its key loops' iterations (outermost first)."""

    get: Dma
    loops: tuple[KeyLoop, ...]
    offset: int

    @property
    def tiles(self) -> int:
        return prod(loop.trips for loop in self.loops)


@dataclass(frozen=True)
class Prepacked:
    """The prepacked array of buffer `buffer`: the tiles of constant tensor `tensor`, `tile` elements
    apart (the buffer's layout, a cache line aligned), `size` elements in all."""

    buffer: str
    tensor: str
    tile: int
    sections: tuple[Section, ...]
    size: int

    @property
    def argument(self) -> str:
        """The name the program's functions and its `run` take the array by (no tensor's name has a dot)."""
        return f"{self.buffer}.prepacked"

    def section(self, get: Dma) -> Section:
        return next(section for section in self.sections if section.get == get)


def prepacked(module: Module, views: Mapping[str, str], layouts: Mapping[str, Layout] | None = None
              ) -> dict[str, Prepacked]:
    """The buffers of `module` (not `views`) filled from prepacked arrays, by name, their tiles placed for
    the buffers' `layouts` (None: as dense as their elements, for a caller that needs only the names)."""
    constants = {tensor.name: tensor for tensor in module.tensors if tensor.is_constant}
    if not constants:
        return {}
    gets: dict[str, list[tuple[Dma, tuple[KeyLoop, ...] | None]]] = {}
    refused: set[str] = set()
    for node, loops, guarded in _walk(module.body):
        if isinstance(node, Dma):
            if node.direction != "get" or node.tensor.name not in constants or guarded:
                refused.add(node.buffer.name)
            else:
                gets.setdefault(node.buffer.name, []).append((node, _key_loops(node, loops)))
        elif isinstance(node, Zero):
            refused.add(node.buffer.name)
        elif isinstance(node, Call):
            refused.add(node.output.name)
    found: dict[str, Prepacked] = {}
    for buffer in module.buffers:
        name = buffer.name
        transfers = gets.get(name)
        if not transfers or name in refused or name in views:
            continue
        tensor = transfers[0][0].tensor.name
        whole = tuple(Const(0) for _ in buffer.shape)
        if any(get.tensor.name != tensor or keys is None or get.buffer.starts != whole
               or get.buffer.extents != buffer.shape for get, keys in transfers):
            continue
        elements = prod(buffer.shape)
        tile = elements if layouts is None else -(-layouts[name].size // ALIGN_ELEMENTS) * ALIGN_ELEMENTS
        sections: list[Section] = []
        offset = 0
        for get, keys in transfers:
            assert keys is not None
            known = next((section for section in sections if section.get == get), None)
            if known is not None:
                if known.loops != keys:  # the same get under other loops: its tiles would be numbered apart
                    break
                continue
            sections.append(Section(get, keys, offset))
            offset += sections[-1].tiles * tile
        else:
            if offset // tile * elements <= GROWTH * prod(constants[tensor].shape) + SLACK:
                found[name] = Prepacked(name, tensor, tile, tuple(sections), max(offset, ALIGN_ELEMENTS))
    return found


def _key_loops(get: Dma, loops: tuple[For, ...]) -> tuple[KeyLoop, ...] | None:
    """The loops around `get` whose variables its tensor box names, or None when the box names
    anything else (a let, a loop of varying bounds) or has an extent not yet settled."""
    if not all(isinstance(extent, int) for extent in get.tensor.extents):
        return None
    names = set().union(*(free_vars(start) for start in get.tensor.starts))
    keys = []
    for loop in loops:
        if loop.var not in names:
            continue
        names.discard(loop.var)
        if not isinstance(loop.start, Const) or loop.stride <= 0:
            return None
        try:
            trips = trip_count(loop)
        except (KeyError, ValueError):
            return None
        keys.append(KeyLoop(loop.var, loop.start.value, loop.stride, trips))
    return None if names else tuple(keys)


def _walk(stmt: Stmt, loops: tuple[For, ...] = (), guarded: bool = False):
    """Every statement in `stmt`, pre-order, with its enclosing loops and whether a condition guards it."""
    yield stmt, loops, guarded
    inner = loops + (stmt,) if isinstance(stmt, For) else loops
    for child in children(stmt):
        yield from _walk(child, inner, guarded or isinstance(stmt, If))

