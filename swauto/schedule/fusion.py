"""Producer/consumer fusion: an element-wise statement runs on its producer's output tiles in local
memory, before they are written back, instead of as a pass of its own over memory.

`fuse_consumers` is a pure `Module -> Module` on the scheduled statements. The front end has checked
what makes it expressible (`swauto.frontend.check.Checker.consumer_fusion`): the consumer is a map
that writes its producer's output tensor in place, both statements write the whole tensor once per
element, and the consumer's other inputs carry only its dimensions, each on one axis of that tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from swauto.errors import Rejected
from swauto.ir import expr as ex
from swauto.ir.nests import loop_nest, map_statements, outermost, rebuild_nest, statements
from swauto.ir.nodes import Access, Call, For, Module


def _input_box(access: Access, consumer: Call, producer: Call, layout: tuple[int, ...]) -> Access:
    """The box of a consumer's input (such as a bias) that one output tile of `producer` needs: each of
    its axes follows the output tensor's axis carrying the same dimension of the consumer (`consumer`
    is the seed's, in the declared order; `producer`'s output is in memory order, `layout`)."""
    out = producer.output
    starts, extents, dims = [], [], []
    for dim in access.dims:
        axis = layout.index(consumer.output.dims.index(dim))
        carried = out.dims[axis]
        if carried is not None and out.dims.count(carried) > 1:
            raise Rejected("fusion not expressible", f"{access.name} would follow one of several axes carrying "
                                                     f"{carried} in {out.name}'s tiles")
        starts.append(out.starts[axis])
        extents.append(out.extents[axis])
        dims.append(carried)
    return Access(access.name, tuple(starts), tuple(extents), tuple(dims))


def indexing_loops(loops: list[For], call: Call) -> frozenset[str]:
    """The loops of a producer's nest that index its output tile (`check_order`). A loop that runs once
    completes nothing: it counts as indexing."""
    return frozenset(loop.var for loop in loops if any(loop.var in ex.free_vars(start) for start in call.output.starts)
                     or ex.constant_value(loop.stop - loop.start) == 1)


def check_order(order: Iterable[str], indexing: frozenset[str]) -> None:
    """Raises `Rejected` unless the producer's loops in `order` (outermost first) run its `indexing_loops`
    outside the others: otherwise a loop completes the output tile after its write-back, and the
    consumer would see a partial result."""
    if not outermost(order, indexing):
        raise Rejected("reduction outside the fused output tile",
                       "a loop that does not index the output runs outside one that does")


def fuse_consumers(module: Module, seed: Module, fusions: list[tuple[int, int]]) -> Module:
    """Fuse each (consumer, producer) pair, given by statement indices of `seed` (the same in `module`,
    whose statements are scheduled): the consumer becomes part of the producer's call (`Call.epilogue`)
    on the producer's output box, and its own statement goes. Raises `Rejected` when a loop that does
    not index the output sits outside one that does (the tile would be written back, then completed
    later, and the consumer would see a partial result)."""
    nests = statements(module)
    seeds = [loop_nest(nest)[1] for nest in statements(seed)]
    gone = set()
    for consumer, producer in fusions:
        loops, call = loop_nest(nests[producer])
        check_order((loop.var for loop in loops), indexing_loops(loops, call))
        seed_consumer = seeds[consumer]
        scheduled = loop_nest(nests[consumer])[1]
        tensor = call.output.name

        layout = module.tensor(tensor).layout or tuple(range(len(call.output.starts)))

        def operand(_: str, access: Access, c: Call = seed_consumer, p: Call = call, t: str = tensor,
                    order: tuple[int, ...] = layout) -> Access:
            return p.output if access.name == t else _input_box(access, c, p, order)

        sizes = tuple((dim, call.size(dim)) for dim in seed_consumer.signature.dims if dim in call.output.dims)
        fused = replace(seed_consumer.with_operands(operand), sizes=sizes, constant=scheduled.constant)
        nests[producer] = rebuild_nest(loops, replace(call, epilogue=(*call.epilogue, fused)))
        gone.add(consumer)
    return map_statements(module, lambda index, _: [] if index in gone else [nests[index]])
