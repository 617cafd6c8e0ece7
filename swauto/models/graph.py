"""ONNX models in: a model's nodes in run order, every tensor's shape with the batch bound, and its weights.

Read with the `onnx` package (an optional dependency: swauto's `onnx` extra). The batch is the
first dimension of every graph input: a model exported with a symbolic batch (`N`, `batch_size`) needs
one (`batch=`), and one given replaces a fixed batch too; ONNX's shape inference then gives every other
tensor its shape. Every failure is a `ModelError` saying which file, node or tensor, and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from swauto.errors import ModelError


@dataclass(frozen=True)
class Node:
    """One ONNX node: its operator type, the tensors it reads and writes (names; '' for an omitted
    optional input) and its attributes as Python values. A node made by fusing several (swauto's own
    `FusedConv`: `rewrite.fuse_activations`) lists the ONNX nodes it stands for in `parts`."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, Any]
    parts: tuple[Node, ...] = ()

    def attribute(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)


@dataclass(frozen=True)
class Graph:
    """A model's graph: `nodes` in an order that runs (ONNX keeps them topologically sorted), every
    tensor's `shapes`, the weights (`constants`, float32), and the names of its inputs and outputs."""

    name: str
    nodes: tuple[Node, ...]
    shapes: Mapping[str, tuple[int, ...]]
    constants: Mapping[str, np.ndarray]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    batch: int
    opset: int  # of the default ONNX domain: a node is run alone (onnxruntime) at the model's own version


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ModelError("reading ONNX models needs the onnx package: pip install onnx (or swauto's 'onnx' "
                         "extra: pip install '.[onnx]' in its folder)") from None
    return onnx


def load_onnx(model: str | Path | Any, batch: int | None = None) -> Graph:
    """The graph of `model` (a path to an .onnx file or an `onnx.ModelProto`) with its inputs' first
    dimension bound to `batch` (None: the model's own, which must then be a number)."""
    onnx = _onnx()
    if isinstance(model, str | Path):
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"{path}: no such ONNX file")
        try:
            proto = onnx.load(str(path))
        except Exception as error:  # protobuf's DecodeError and friends: any damage to the file
            raise ModelError(f"{path} is not an ONNX model ({type(error).__name__}: {error})") from None
        where = str(path)
    elif isinstance(model, onnx.ModelProto):
        proto, where = model, model.graph.name or "the model"
    else:
        raise ModelError(f"a model is a path to an .onnx file or an onnx.ModelProto, got {type(model).__name__}")
    proto = _bind_batch(proto, batch, where)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as error:
        raise ModelError(f"{where}: ONNX shape inference failed ({error})") from None
    graph = inferred.graph
    constants = {init.name: _float32(onnx.numpy_helper.to_array(init), init.name, where) for init in graph.initializer}
    for node in graph.node:  # Constant nodes are weights too
        if node.op_type == "Constant":
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is None:
                raise ModelError(f"{where}: Constant node {node.name or node.output[0]} has no tensor value")
            constants[node.output[0]] = _float32(onnx.numpy_helper.to_array(value.t), node.output[0], where)
    shapes: dict[str, tuple[int, ...]] = {name: array.shape for name, array in constants.items()}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        dims = info.type.tensor_type.shape.dim
        if info.name in shapes or not info.type.tensor_type.HasField("shape"):
            continue
        if any(not d.HasField("dim_value") for d in dims):
            continue  # unknown: said below if a node needs it
        shapes[info.name] = tuple(int(d.dim_value) for d in dims)
    for info in [*graph.input, *graph.output]:
        if info.type.tensor_type.elem_type != onnx.TensorProto.FLOAT and info.name not in constants:
            kind = onnx.TensorProto.DataType.Name(info.type.tensor_type.elem_type)
            raise ModelError(f"{where}: tensor {info.name} is {kind}; swauto runs float32 models")
    nodes = tuple(Node(node.name or f"{node.op_type}_{index}", node.op_type, tuple(node.input), tuple(node.output),
                       {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute})
                  for index, node in enumerate(graph.node) if node.op_type != "Constant")
    for node in nodes:
        for name in (*node.inputs, *node.outputs):
            if name and name not in shapes:
                raise ModelError(f"{where}: the shape of {name} (of node {node.name}, {node.op}) is unknown "
                                 "after shape inference")
    inputs = tuple(i.name for i in graph.input if i.name not in constants)
    bound = batch if batch is not None else (shapes[inputs[0]][0] if inputs and shapes[inputs[0]] else 1)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    return Graph(graph.name or where, nodes, shapes, constants, inputs, tuple(o.name for o in graph.output), bound,
                 opset)


def _bind_batch(proto: Any, batch: int | None, where: str) -> Any:
    """A copy of `proto` whose graph inputs (not weights) have `batch` as their first dimension."""
    onnx = _onnx()
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    weights = {init.name for init in proto.graph.initializer}
    for info in proto.graph.input:
        if info.name in weights:
            continue
        dims = info.type.tensor_type.shape.dim
        if not dims:
            raise ModelError(f"{where}: input {info.name} has no shape")
        if batch is not None:
            dims[0].Clear()
            dims[0].dim_value = batch
        elif not dims[0].HasField("dim_value"):
            raise ModelError(f"{where}: input {info.name} has a symbolic batch dimension "
                             f"{dims[0].dim_param or '?'!r}; give the batch (-D batch=N, or batch=)")
        for index, dim in enumerate(dims[1:], start=1):
            if not dim.HasField("dim_value"):
                raise ModelError(f"{where}: dimension {index} of input {info.name} is symbolic "
                                 f"({dim.dim_param or '?'}); only the batch may be")
    return proto


def _float32(array: np.ndarray, name: str, where: str) -> np.ndarray:
    """A weight as float32 (integer weights, such as a Reshape's shape, stay as they are)."""
    if array.dtype == np.float32 or array.dtype.kind in "iub":
        return array
    if array.dtype.kind == "f":
        raise ModelError(f"{where}: weight {name} is {array.dtype}; swauto runs float32 models")
    raise ModelError(f"{where}: weight {name} has the unsupported type {array.dtype}")
