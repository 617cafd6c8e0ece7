"""Run a whole ONNX model with swauto kernels: `Model` compiles each distinct layer once and runs the
nodes in order, each through its kernel.

The weights are arranged once, in the layouts the kernels keep them in, or prepared once where a kernel
computes from them apart (a Winograd convolution's filter transform: `layers.bind`). The window
operators' activations (convolution, batch norm, pooling) are held in one memory form, [rows, columns,
batch, channels] (`layers.ACTIVATION_FORM`), to which every such kernel is pinned, and element-wise maps
work in their inputs' form: nothing is converted between layers but where a node wants ONNX's NCHW
(Flatten) and at the model's edges. Each node writes arrays kept from call to call (`layers.Outputs`),
so a call allocates only its results. Batch norms after convolutions are folded into them
(`rewrite.fold_batch_norms`), and residual adds and activations after them fused into them
(`rewrite.fuse_activations`): a convolution's output starts from its bias (and residual), and the
activation runs on its output tiles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from swauto.api import as_array
from swauto.errors import ArgumentError, ModelError
from swauto.models.graph import Graph, load_onnx
from swauto.models.layers import (
    ACTIVATION_FORM,
    MAPPINGS,
    Layer,
    Outputs,
    Unsupported,
    bind,
    in_form,
    layer_of,
    run,
    to_form,
)
from swauto.models.rewrite import rewritten


class Model:
    """An ONNX model compiled for `target` (a path or an `onnx.ModelProto`; `batch` binds its inputs'
    first dimension). Call it with float32 arrays named after the model's inputs, in ONNX's layouts
    (NumPy's, or any that speaks DLPack: a PyTorch tensor is read in place);
    it returns the model's outputs by name. `Model.layers` lists each node's operator and candidate.
    Its distinct layers are tuned first on `jobs` local processes, or on the Dask `cluster` at that
    address (`swauto.models.tune.tune_layers`). With `winograd` False, no layer weighs Winograd's
    convolutions (`layers.layer_of`). Each layer's kernel runs on `threads` cores (default: all this
    process may use), or on one where the model predicts its call too small to share (`swauto.compile`'s
    choice)."""

    def __init__(self, model: str | Path | Any, target: str = "host", batch: int | None = None,
                 threads: int | None = None, tuner: str = "model", jobs: int | None = None,
                 cluster: str | None = None, winograd: bool = True) -> None:
        import swauto
        from swauto.models.tune import settings, tune_layers

        threads, jobs = settings(target, tuner, batch, threads, jobs)
        self.graph: Graph = rewritten(load_onnx(model, batch))
        self.target = target
        self.form = ACTIVATION_FORM  # the window operators' activations, in memory
        self.layers: list[Layer] = []
        self.kernels: dict[Any, swauto.Kernel] = {}
        # Per layer, what runs its calls (its kernel, or the kernel prepared on its weights) and the weights
        # each call is handed, in the kernel's layouts (`layers.bind`).
        self._runs: list[tuple[Any, dict[str, np.ndarray]]] = []
        for node in self.graph.nodes:
            try:
                self.layers.append(layer_of(node, self.graph, self.form, winograd))
            except Unsupported as reason:
                raise ModelError(f"node {node.name} ({node.op}) cannot run on swauto: {reason}") from None
        tune_layers([layer for layer in self.layers if layer.operator], target, threads, tuner, jobs, cluster)
        for node, layer in zip(self.graph.nodes, self.layers, strict=True):
            if layer.operator is not None and layer.key not in self.kernels:
                self.kernels[layer.key] = layer.compile(target, threads, tuner)
            kernel = self.kernels.get(layer.key)
            weights = MAPPINGS[node.op].weights(layer, self.graph)
            self._runs.append((None, {}) if kernel is None else bind(kernel, weights))
        self._outputs = [Outputs(layer.layouts, keep=True) for layer in self.layers]
        self._lock = threading.Lock()  # the kept output arrays serve one call at a time
        self.last_call_s: float | None = None

    @property
    def inputs(self) -> dict[str, tuple[int, ...]]:
        """The arrays a call takes: name -> shape."""
        return {name: self.graph.shapes[name] for name in self.graph.inputs}

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        values = self._validate(inputs)  # the activations, each in its form (layers.to_form):
        forms: dict[str, str] = {}  # NCHW where not said
        with self._lock:
            started = time.perf_counter()
            for layer, (runner, weights), outputs in zip(self.layers, self._runs, self._outputs, strict=True):
                mapping = MAPPINGS[layer.node.op]
                local, form = in_form(layer, self.graph, values, forms)
                arrays = mapping.arrays(layer, self.graph, local, outputs)
                if runner is not None:
                    arrays = run(runner, arrays, weights)
                result = mapping.output(layer, self.graph, arrays, local)
                if mapping.activations:  # computed in the declared 'hwcn' form, held in the model's
                    result, form = to_form(result, form, self.form), self.form
                values[layer.node.outputs[0]], forms[layer.node.outputs[0]] = result, form
            # Copies: the kept arrays are written again by the next call.
            results = {name: np.array(to_form(values[name], forms.get(name, "nchw"), "nchw"), order="C")
                       for name in self.graph.outputs}
            self.last_call_s = time.perf_counter() - started
        return results

    def _validate(self, inputs: Mapping[str, object]) -> dict[str, np.ndarray]:
        expected = self.inputs
        unknown = sorted(set(inputs) - set(expected))
        if unknown:
            raise ArgumentError(f"the model has no input {unknown[0]}; it takes {', '.join(expected)}")
        checked = {}
        for name, shape in expected.items():
            if name not in inputs:
                raise ArgumentError(f"missing input {name} (the model takes {', '.join(expected)})")
            array = as_array(inputs[name], f"input {name}")
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
