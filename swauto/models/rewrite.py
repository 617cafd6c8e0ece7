"""Rewrites of a model's graph before it is mapped to kernels, each exact up to float rounding.

`fold_batch_norms`: a BatchNormalization whose input is a Conv's output, read by nothing else, is
folded into that Conv's weights and bias (inference only: the statistics are constants), as inference
runtimes do. The batch norm's pass over memory disappears, and the bias it leaves is added by the
convolution itself (its output starts from the bias: `layers`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from swauto.models.graph import Graph, Node


def fold_batch_norms(graph: Graph) -> Graph:
    """`graph` with every foldable batch norm folded into its convolution (see the module docstring)."""
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for name in node.inputs:
            readers[name] = readers.get(name, 0) + 1
    producers = {node.outputs[0]: node for node in graph.nodes}
    constants = dict(graph.constants)
    folded: dict[str, Node] = {}  # conv name -> the conv rewritten
    dropped: set[str] = set()  # batch norms folded away
    for node in graph.nodes:
        conv = producers.get(node.inputs[0]) if node.op == "BatchNormalization" else None
        if conv is None or conv.op != "Conv" or readers[conv.outputs[0]] != 1 or conv.outputs[0] in graph.outputs \
                or not all(name in constants for name in (*node.inputs[1:5], *conv.inputs[1:])):
            continue
        gamma, beta, mean, variance = (constants[name].astype(np.float64) for name in node.inputs[1:5])
        scale = gamma / np.sqrt(variance + node.attribute("epsilon", 1e-5))
        weight = constants[conv.inputs[1]].astype(np.float64)
        bias = constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
        names = (f"{conv.name}.folded.weight", f"{conv.name}.folded.bias")
        constants[names[0]] = (weight * scale.reshape(-1, 1, 1, 1)).astype(np.float32)
        constants[names[1]] = ((bias - mean) * scale + beta).astype(np.float32)
        folded[conv.name] = replace(conv, inputs=(conv.inputs[0], *names), outputs=node.outputs)
        dropped.add(node.name)
    if not folded:
        return graph
    nodes = tuple(folded.get(node.name, node) for node in graph.nodes if node.name not in dropped)
    used = {name for node in nodes for name in node.inputs}
    shapes = {**graph.shapes, **{name: constants[name].shape for conv in folded.values() for name in conv.inputs[1:]}}
    return replace(graph, nodes=nodes, shapes=shapes,
                   constants={name: value for name, value in constants.items() if name in used})
