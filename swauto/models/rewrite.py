"""Rewrites of a model's graph before it is mapped to kernels, each exact up to float rounding.

`fold_batch_norms`: a BatchNormalization whose input is a Conv's output, read by nothing else, is
folded into that Conv's weights and bias (inference only: the statistics are constants), as inference
runtimes do. The batch norm's pass over memory disappears, and the bias it leaves is added by the
convolution itself (its output starts from the bias: `layers`).

`fuse_activations`: a Conv, then an Add of another activation (a residual), then a Relu or a
Clip(0, 6), each read only by the next, become one `FusedConv` node (inputs X, W, B and the residual
Z, attribute `activation`: 'relu', 'relu6' or None; the name onnxruntime gives its own such node).
Its output starts from the bias plus the residual and the activation runs on each output tile before
it is written back (`examples/conv2d_relu.sw` and its kin), so neither the Add nor the activation is a
pass of its own over memory.

`rewritten` applies both, in that order: what `Model` runs and `tune_model` tunes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from swauto.models.graph import Graph, Node
from swauto.models.layers import Unsupported, activation_of, layer_of


def fold_batch_norms(graph: Graph) -> Graph:
    """`graph` with every foldable batch norm folded into its convolution (see the module docstring)."""
    sole = _sole_readers(graph)
    producers = {node.outputs[0]: node for node in graph.nodes}
    constants = dict(graph.constants)
    folded: dict[str, Node] = {}  # conv name -> the conv rewritten
    dropped: set[str] = set()  # batch norms folded away
    for node in graph.nodes:
        conv = producers.get(node.inputs[0]) if node.op == "BatchNormalization" else None
        if conv is None or conv.op != "Conv" or sole.get(conv.outputs[0]) is not node \
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


def rewritten(graph: Graph) -> Graph:
    """`graph` through every rewrite, in order (the module docstring)."""
    return fuse_activations(fold_batch_norms(graph))


def _sole_readers(graph: Graph) -> dict[str, Node]:
    """Each tensor read by one node alone and not an output of the graph -> that node: a tensor a
    rewrite may keep from memory."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for name in dict.fromkeys(node.inputs):
            readers.setdefault(name, []).append(node)
    return {name: nodes[0] for name, nodes in readers.items() if len(nodes) == 1 and name not in graph.outputs}


def fuse_activations(graph: Graph) -> Graph:
    """`graph` with each Conv [-> Add] [-> Relu or Clip(0, 6)] chain as one `FusedConv` node, placed
    where the chain's last node was (every tensor it reads is computed by then; see the module docstring)."""
    sole = _sole_readers(graph)
    fused: dict[str, Node] = {}  # the chain's last node's name -> the fused node
    taken: set[str] = set()  # nodes that a chain has taken
    for conv in graph.nodes:
        if conv.op != "Conv":
            continue
        try:
            layer_of(conv, graph)
        except Unsupported:  # its readers stay nodes of their own, which may compile
            continue
        parts, residual, activation = [conv], "", None
        following = sole.get(conv.outputs[0])
        if following is not None and following.op == "Add" and following.name not in taken:
            others = [name for name in following.inputs if name != conv.outputs[0]]
            if len(others) == 1 and others[0] not in graph.constants \
                    and graph.shapes[others[0]] == graph.shapes[conv.outputs[0]]:
                parts.append(following)
                residual = others[0]
                following = sole.get(following.outputs[0])
        if following is not None and following.name not in taken:
            activation = activation_of(following, graph)
            if activation is not None:
                parts.append(following)
        if len(parts) == 1:
            continue
        taken.update(part.name for part in parts)
        inputs = (*conv.inputs[:2], conv.inputs[2] if len(conv.inputs) > 2 else "", residual)
        fused[parts[-1].name] = Node(conv.name, "FusedConv", inputs, parts[-1].outputs,
                                     {**conv.attributes, "activation": activation}, tuple(parts))
    if not fused:
        return graph
    return replace(graph, nodes=tuple(fused.get(node.name, node) for node in graph.nodes
                                      if node.name in fused or node.name not in taken))
