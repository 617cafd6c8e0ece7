"""Run a whole ONNX model with swauto kernels: `Model` compiles each distinct layer once and runs the
nodes in order, each through its kernel.

The weights are arranged once, in the layouts the kernels keep them in. This first version converts
the activations at every layer: each node's inputs go from ONNX's layouts (NCHW) to its kernel's and
its output back, and what a kernel does not compute (a bias) is NumPy's. Keeping
activations in the kernels' layouts between layers, converting only at the model's edges, and fusing
neighbours (conv + bias + ReLU) are the next steps.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from swauto.errors import ArgumentError, ModelError
from swauto.models.graph import Graph, load_onnx
from swauto.models.layers import MAPPINGS, Layer, Unsupported, layer_of, library


class Model:
    """An ONNX model compiled for `target` (a path or an `onnx.ModelProto`; `batch` binds its inputs'
    first dimension). Call it with float32 arrays named after the model's inputs, in ONNX's layouts;
    it returns the model's outputs by name. `Model.layers` lists each node's operator and candidate."""

    def __init__(self, model: str | Path | Any, target: str = "host", batch: int | None = None,
                 threads: int | None = None, tuner: str = "model") -> None:
        import swauto
        from swauto.frontend.integers import check_integer

        if batch is not None:
            check_integer(batch, "batch", 1)
        self.graph: Graph = load_onnx(model, batch)
        self.target = target
        self.layers: list[Layer] = []
        self.kernels: dict[Any, swauto.Kernel] = {}
        self._weights: list[dict[str, np.ndarray]] = []  # per layer, in its kernel's layouts
        for node in self.graph.nodes:
            try:
                layer = layer_of(node, self.graph)
            except Unsupported as reason:
                raise ModelError(f"node {node.name} ({node.op}) cannot run on swauto: {reason}") from None
            self.layers.append(layer)
            if layer.operator is not None and layer.key not in self.kernels:
                self.kernels[layer.key] = swauto.compile(library(layer.operator), dict(layer.params), target=target,
                                                         threads=threads, tuner=tuner)
            kernel = self.kernels.get(layer.key)
            weights = MAPPINGS[node.op].weights(layer, self.graph)
            self._weights.append({} if kernel is None else _arranged(kernel, weights))
        self.last_call_s: float | None = None

    @property
    def inputs(self) -> dict[str, tuple[int, ...]]:
        """The arrays a call takes: name -> shape."""
        return {name: self.graph.shapes[name] for name in self.graph.inputs}

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        values: dict[str, np.ndarray] = dict(self.graph.constants)
        values.update(self._validate(inputs))
        started = time.perf_counter()
        for layer, weights in zip(self.layers, self._weights, strict=True):
            mapping = MAPPINGS[layer.node.op]
            arrays = mapping.arrays(layer, self.graph, values)
            if layer.operator is not None:
                kernel = self.kernels[layer.key]
                arranged = _arranged(kernel, arrays)
                kernel.run_arranged(**arranged, **weights)
                arrays = {name: arranged[name].transpose(np.argsort(kernel.layouts[name])) if name in kernel.layouts
                          else arranged[name] for name in arrays}  # the declared layouts, as views
            values[layer.node.outputs[0]] = mapping.output(layer, self.graph, arrays, values)
        self.last_call_s = time.perf_counter() - started
        return {name: values[name] for name in self.graph.outputs}

    def _validate(self, inputs: Mapping[str, object]) -> dict[str, np.ndarray]:
        expected = self.inputs
        unknown = sorted(set(inputs) - set(expected))
        if unknown:
            raise ArgumentError(f"the model has no input {unknown[0]}; it takes {', '.join(expected)}")
        checked = {}
        for name, shape in expected.items():
            if name not in inputs:
                raise ArgumentError(f"missing input {name} (the model takes {', '.join(expected)})")
            array = inputs[name]
            if not isinstance(array, np.ndarray):
                raise ArgumentError(f"input {name} must be a NumPy array, got {type(array).__name__}")
            if array.dtype != np.float32:
                raise ArgumentError(f"input {name} is {array.dtype}; the model takes float32 "
                                    "(convert with .astype(numpy.float32))")
            if array.shape != shape:
                raise ArgumentError(f"input {name} has shape {array.shape}; expected {shape}")
            checked[name] = array
        return checked

    def __repr__(self) -> str:
        return (f"<swauto.Model {self.graph.name} batch {self.graph.batch} on {self.target}: {len(self.layers)} "
                f"nodes, {len(self.kernels)} kernels>")


def _arranged(kernel: Any, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` (declared layouts) in the layouts `kernel` keeps them in (`Kernel.layouts`)."""
    return {name: np.ascontiguousarray(array.transpose(kernel.layouts[name])) if name in kernel.layouts else array
            for name, array in arrays.items()}
