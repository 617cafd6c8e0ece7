"""ONNX nodes as swauto operators: which `.sw` file of the operator library (`examples/`, installed as
`swauto.examples`) computes a node, with which sizes, and how its tensors go between ONNX's layouts
(NCHW activations, [No, Ni, Kr, Kc] weights) and the operator's declared ones.

A 4-D activation is held in one of three forms, named by its axes in memory order: ONNX's 'nchw', the
library's declared [rows, columns, channels, batch] ('hwcn', what every window operator declares) or
[rows, columns, batch, channels] ('hwnc', channels innermost). Each mapping computes in one `form` (or
in its inputs' own, for element-wise maps). A model keeps its window operators' activations in one
memory form: each such layer pins its kernel's activation tensors (`OnnxMapping.activations`) to that
layout (`Layer.layouts`, `swauto.compile(layouts=...)`), so a chain of convolutions, batch norms, ReLUs
and poolings converts nothing and only a node that wants NCHW (Flatten) and the model's edges do.

Each ONNX operator is one `OnnxMapping` registered in `MAPPINGS`: `layer` reads a node into a `Layer`
(or says why the node is not supported), `weights` arranges the kernel's tensors that come from the
model's weights (once per model), `arrays` the others (the node's activations, and its outputs from
`Outputs`, each call), and `output` gives the node's output back. Nodes that only reshape (Flatten, Reshape, Identity,
Dropout at inference) have no kernel. What a kernel does not compute, a mapping says in
`Layer.numpy` (a Gemm's bias and alpha are NumPy's; a Conv's bias is where its output starts, as the
convolutions add into their output, apart from those a bias kernel runs, which add it themselves).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from swauto.ir.memory import inverse_axes
from swauto.models.graph import Graph, Node

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Layer:
    """A node as a swauto operator: the library file (None: a reshape, no kernel), its size parameters,
    the flops it computes, a short description of its shape, what NumPy adds after the kernel, and the
    memory layouts its kernel must keep tensors in (`swauto.compile`'s `layouts`)."""

    node: Node
    operator: str | None
    params: Mapping[str, int] = field(default_factory=dict)
    flops: int = 0
    shape: str = ""
    numpy: str = ""
    layouts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # Other library files that compute the node alike (its parameters, its tensors), which `swauto.choose`
    # weighs against `operator` (Winograd's for a 3 x 3 convolution), and the kernel's tensors that come from
    # the model's weights, prepared once per model (`swauto.compile(constants=...)`: Winograd's filter
    # transforms, the host's tiles of them arranged once).
    alternatives: tuple[str, ...] = ()
    constants: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        """Layers of one key compile to one kernel (a model's repeated blocks are tuned once)."""
        return (self.operator, self.alternatives, self.constants, tuple(sorted(self.params.items())),
                tuple(sorted(self.layouts.items())))

    @property
    def sources(self) -> tuple[str, ...]:
        """The library files the kernel is chosen among: `operator`, then its `alternatives`."""
        assert self.operator is not None
        return self.operator, *self.alternatives

    def compile(self, target: str, threads: int, tuner: str) -> Any:
        """This layer's kernel (a `swauto.Kernel` on at most `threads` cores, as `swauto.compile` decides);
        the layer must have an operator."""
        return compile_layer([library(source) for source in self.sources], dict(self.params), target, threads,
                             tuner, dict(self.layouts), self.constants)


def compile_layer(sources: Sequence[str | Path], params: dict[str, int], target: str, threads: int, tuner: str,
                  layouts: dict[str, tuple[int, ...]], constants: tuple[str, ...]) -> Any:
    """The kernel of one source (paths or texts of `.sw` files), or the one `swauto.choose` keeps of several."""
    import swauto

    options = {"target": target, "threads": threads, "tuner": tuner, "layouts": layouts, "constants": constants}
    if len(sources) == 1:
        return swauto.compile(sources[0], params, **options)
    return swauto.choose(list(sources), params, **options)


class Outputs:
    """The arrays a layer's kernel writes, each in the layout the layer keeps it in and seen in its
    declared one. With `keep`, a tensor's array is made once and handed out again at every call (a
    model runs one call at a time and copies its outputs out), so a call allocates nothing."""

    def __init__(self, layouts: Mapping[str, tuple[int, ...]], keep: bool = False) -> None:
        self.layouts = layouts
        self.keep = keep
        self._arrays: dict[str, np.ndarray] = {}

    def __call__(self, tensor: str, shape: tuple[int, ...]) -> np.ndarray:
        """The array of `tensor`, of declared `shape`, its contents undefined."""
        array = self._arrays.get(tensor)
        if array is None:
            layout = self.layouts.get(tensor, tuple(range(len(shape))))
            array = np.empty([shape[axis] for axis in layout], np.float32).transpose(inverse_axes(layout))
            if self.keep:
                self._arrays[tensor] = array
        return array


class Unsupported(Exception):
    """Internal: why a node cannot be compiled (a sentence): `Model` raises it as a `ModelError`,
    `tune_model` lists it."""


@dataclass(frozen=True)
class OnnxMapping:
    """How one ONNX operator becomes a swauto operator (see the module docstring)."""

    layer: Callable[[Node, Graph], Layer]
    arrays: Callable[[Layer, Graph, Mapping[str, np.ndarray], Outputs], Arrays]
    output: Callable[[Layer, Graph, Arrays, Mapping[str, np.ndarray]], np.ndarray]
    weights: Callable[[Layer, Graph], Arrays] = lambda layer, graph: {}
    form: str = "nchw"  # of its 4-D activations: 'nchw', 'hwcn', or 'any' (its inputs' form)
    activations: tuple[str, ...] = ()  # its kernel's 4-D activation tensors (form 'hwcn'), laid out as the model's


def library(operator: str) -> Path:
    """The path of an operator library file (`conv2d.sw`)."""
    return Path(str(resources.files("swauto.examples") / operator))


# The form a model keeps its window operators' activations in: channels innermost, which the depthwise
# convolutions and element-wise maps vectorize along and the convolutions take as well (at batch 1
# both library forms are one memory order). Measured end to end on 2 threads at batch 8 against
# 'hwcn': MobileNetV2 87 ms against 154, ResNet-18 169 against 191.
ACTIVATION_FORM = "hwnc"


def to_form(array: np.ndarray, source: str, target: str) -> np.ndarray:
    """A 4-D activation held in form `source` as form `target` (a view); other arrays as they are."""
    return array.transpose([source.index(axis) for axis in target]) if array.ndim == 4 and source != target else array


def arranged(kernel: Any, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` (declared layouts) in the layouts `kernel` (a `swauto.Kernel`) keeps them in."""
    from swauto.api import arranged_arrays  # (the API loads the backends: not at import)

    return arranged_arrays(kernel.layouts, arrays)


def bind(kernel: Any, weights: Mapping[str, np.ndarray]) -> tuple[Any, Arrays]:
    """What runs a layer's calls and the weights each call is handed: a kernel compiled with constants
    prepared on `weights` (declared layouts) once (a Winograd convolution's filter transform, the host's
    tiles of the weights arranged) and none; any other kernel and `weights` in its layouts."""
    if kernel.constants:
        return kernel.prepare(**weights), {}
    return kernel, arranged(kernel, weights)


def run(kernel: Any, arrays: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]) -> Arrays:
    """Run `kernel` (a `swauto.Kernel`, or a `swauto.Prepared`: `bind`) on `arrays` (declared layouts,
    converted only where they are not in the kernel's) and `weights` (already arranged); `arrays` back,
    seen in their declared layouts."""
    ready = arranged(kernel, arrays)
    kernel.run_arranged(**ready, **weights)
    layouts = kernel.layouts
    return {name: ready[name].transpose(inverse_axes(layouts[name])) if name in layouts else ready[name]
            for name in arrays}


def in_form(layer: Layer, graph: Graph, activations: Mapping[str, np.ndarray],
            forms: Mapping[str, str]) -> tuple[dict[str, np.ndarray], str]:
    """The node's inputs, weights as they are and `activations` (each held in its form in `forms`, NCHW
    where it has none) in the form the node's mapping computes in; and that form."""
    inputs = [name for name in layer.node.inputs if name and name not in graph.constants]
    form = MAPPINGS[layer.node.op].form
    if form == "any":
        form = forms.get(inputs[0], "nchw") if inputs else "nchw"
    return {**{name: graph.constants[name] for name in layer.node.inputs if name in graph.constants},
            **{name: to_form(activations[name], forms.get(name, "nchw"), form) for name in inputs}}, form


def _input(graph: Graph, node: Node, index: int) -> tuple[int, ...]:
    return graph.shapes[node.inputs[index]]


def _image(graph: Graph, node: Node) -> tuple[int, int, int, int]:
    """(batch, channels, rows, columns) of the node's NCHW input, or Unsupported."""
    shape = _input(graph, node, 0)
    if len(shape) != 4:
        raise Unsupported(f"its input is {len(shape)}-D; swauto compiles images (NCHW, 4-D) here")
    return shape  # type: ignore[return-value]


def _weight(graph: Graph, node: Node, index: int, what: str) -> np.ndarray:
    name = node.inputs[index]
    if name not in graph.constants:
        raise Unsupported(f"its {what} ({name}) is computed by the graph; swauto compiles it only as a weight")
    return graph.constants[name]


def _bias(graph: Graph, node: Node, index: int) -> np.ndarray | None:
    return _weight(graph, node, index, "bias") if len(node.inputs) > index and node.inputs[index] else None


# --- Conv --------------------------------------------------------------------------------------------


def _conv_window(node: Node, graph: Graph, kernel: tuple[int, int]) -> tuple[int, int, int]:
    """(stride, rows padded, columns padded) of a 2-D Conv or pooling node, or Unsupported."""
    strides = tuple(node.attribute("strides", (1, 1)))
    dilations = tuple(node.attribute("dilations", (1, 1)))
    if any(d != 1 for d in dilations):
        raise Unsupported(f"dilations {list(dilations)}: swauto has no dilated window")
    if strides[0] != strides[1]:
        raise Unsupported(f"strides {list(strides)}: swauto's operators take one stride for rows and columns")
    auto_pad = node.attribute("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        _, _, rows, columns = _input(graph, node, 0)
        pads = []
        for size, k in zip((rows, columns), kernel, strict=True):
            total = max(0, (math.ceil(size / strides[0]) - 1) * strides[0] + k - size)
            if total % 2:
                raise Unsupported(f"auto_pad {auto_pad} pads unevenly ({total} in all)")
            pads.append(total // 2)
        return strides[0], pads[0], pads[1]
    pads = tuple(node.attribute("pads", (0, 0, 0, 0))) if auto_pad in ("NOTSET", "") else (0, 0, 0, 0)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise Unsupported(f"pads {list(pads)}: swauto pads both sides of an axis alike")
    return strides[0], pads[0], pads[1]


def _conv_layer(node: Node, graph: Graph) -> Layer:
    batch, channels, rows, columns = _image(graph, node)
    weight = _weight(graph, node, 1, "weight")
    outputs, per_group, kr, kc = weight.shape
    stride, pad_r, pad_c = _conv_window(node, graph, (kr, kc))
    group = node.attribute("group", 1)
    _, _, out_rows, out_columns = graph.shapes[node.outputs[0]]
    shape = (f"{channels}->{outputs}, {rows}x{columns}, {kr}x{kc}" + (f"/{stride}" if stride > 1 else "")
             + (f", pad {pad_r}x{pad_c}" if pad_r or pad_c else ""))
    window = {"Ri": rows, "Ci": columns, "Kr": kr, "Kc": kc, "stride": stride, "pad_r": pad_r, "pad_c": pad_c}
    activation = node.attribute("activation")  # a FusedConv's
    suffix = "".join(f" + {part.op.lower()}" for part in node.parts[1:])
    if group == 1:
        flops = 2 * batch * outputs * out_rows * out_columns * channels * kr * kc
        params = {"B": batch, "Ni": channels, "No": outputs, **window}
        operator, alternatives = _CONVOLUTIONS[False, activation], ()
        if (kr, kc, stride) == (3, 3, 1) and channels > _WINOGRAD_FROM and activation in _WINOGRAD:
            alternatives = _WINOGRAD[activation]
        elif activation in _BIAS_KERNELS and not _residual(node):
            operator = _BIAS_KERNELS[activation]
        # A bias kernel takes its bias as a weight too (`_conv_weights`).
        constants = ("weight", "bias") if operator in _BIAS_KERNELS.values() else ("weight",)
        return Layer(node, operator, params, flops, shape + suffix, alternatives=alternatives, constants=constants)
    if group == channels == outputs and per_group == 1:
        flops = 2 * batch * channels * out_rows * out_columns * kr * kc
        return Layer(node, _CONVOLUTIONS[True, activation], {"B": batch, "C": channels, **window}, flops,
                     "depthwise " + shape + suffix, constants=("weight",))
    raise Unsupported(f"group = {group} with {channels} -> {outputs} channels: swauto compiles dense (group 1) "
                      "and depthwise (group = channels, one output per channel) convolutions")


# (depthwise, the activation run on its output) -> the library's convolution. Each adds into its output,
# which starts from the bias (and a residual). Overwriting it instead, with the bias added on each
# output tile, spares that fill where no loop around the GEMM reduces (1 x 1 kernels), but took 0.93-1.24x
# the time of the fill and the convolution on four of MobileNetV2's expansions (more on three; 2026-11-26).
_CONVOLUTIONS = {(False, None): "conv2d.sw", (False, "relu"): "conv2d_relu.sw", (False, "relu6"): "conv2d_relu6.sw",
                 (True, None): "conv2d_depthwise.sw", (True, "relu"): "conv2d_depthwise_relu.sw",
                 (True, "relu6"): "conv2d_depthwise_relu6.sw"}
# (the activation run on its output) -> the Winograd convolutions a dense 3 x 3 layer at stride 1 also
# weighs (`swauto.choose`, their filter transforms prepared once per model): F(2x2, 3x3) and F(4x4, 3x3),
# written with the ReLU networks put after their 3 x 3 layers (and the activation layouts a model pins).
# Only above 32 input channels: up to 32 the implicit convolution joins the kernel's taps to K, and on the
# workload list (benchmarks/host_conv.py, 2026-11-28) Winograd's were chosen only from 64 channels on.
_WINOGRAD = {"relu": ("conv2d_winograd_relu.sw", "conv2d_winograd4_relu.sw")}
_WINOGRAD_FROM = 32
# A dense layer with its activation, no residual and no Winograd form to weigh overwrites its output
# instead, its bias added on each output tile: the output is then written once and never read, where
# adding into it NumPy first fills it with the bias and the kernel reads it back. A first layer's
# output is by far its largest tensor (32-64 channels for 3: on the SW26010 at batch 1, MobileNetV2's
# stem ran at 19.5% of peak at most while adding into its output); on the host, MobileNetV2 with its
# expansions and head so too (17 layers besides its stem) ran 6 - 8% faster end to end, ResNet-18 (3
# layers) within the noise (2026-11-29, Zen 3).
_BIAS_KERNELS = {"relu": "conv2d_bias_relu.sw", "relu6": "conv2d_bias_relu6.sw"}


def _overwrites(layer: Layer) -> bool:
    """Whether the layer's kernel overwrites its output and adds the bias itself (`_BIAS_KERNELS`)."""
    return layer.operator in _BIAS_KERNELS.values()


def _residual(node: Node) -> str:
    """A FusedConv's residual input (added to its output before the activation), or ''."""
    return node.inputs[3] if len(node.inputs) > 3 else ""


def _conv_weights(layer: Layer, graph: Graph) -> Arrays:
    weight = graph.constants[layer.node.inputs[1]]
    if "C" in layer.params:  # depthwise
        return {"weight": np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0))}  # [Kr, Kc, C]
    weights = {"weight": np.ascontiguousarray(weight.transpose(2, 3, 0, 1))}  # [Kr, Kc, No, Ni]
    if _overwrites(layer):
        bias = _bias(graph, layer.node, 2)
        weights["bias"] = np.zeros(weight.shape[0], np.float32) if bias is None else bias
    return weights


def _conv_arrays(layer: Layer, graph: Graph, values: Mapping[str, np.ndarray], outputs: Outputs) -> Arrays:
    """The window's arrays, the output starting from the bias (or zero) plus a FusedConv's residual: the
    kernel adds the convolution to it."""
    arrays = _window_arrays(layer, graph, values, outputs)
    if _overwrites(layer):
        return arrays  # the kernel overwrites its output and adds the bias itself
    bias = _bias(graph, layer.node, 2)
    bias = np.float32(0) if bias is None else bias.reshape(1, 1, -1, 1)  # NumPy walks the views in memory order
    residual = _residual(layer.node)
    if residual:
        np.add(values[residual], bias, out=arrays["output"])
    else:
        arrays["output"][...] = bias
    return arrays


# --- Gemm and MatMul ------------------------------------------------------------------------------------


def _gemm_layer(node: Node, graph: Graph) -> Layer:
    a, b = _input(graph, node, 0), _input(graph, node, 1)
    if len(a) != 2 or len(b) != 2:
        raise Unsupported(f"its operands are {len(a)}-D and {len(b)}-D; swauto compiles 2-D products")
    if node.op == "Gemm" and node.attribute("transA", 0):
        raise Unsupported("transA = 1: swauto's GEMM reads A as stored, M x K")
    m, k = a
    n = b[0] if node.attribute("transB", 0) else b[1]
    numpy = []
    if node.op == "Gemm":
        if node.attribute("alpha", 1.0) != 1.0:
            numpy.append("alpha")
        if len(node.inputs) > 2 and node.inputs[2]:
            numpy.append("bias")
    return Layer(node, "gemm.sw", {"M": m, "N": n, "K": k}, 2 * m * n * k, f"{m}x{n}x{k}", " and ".join(numpy),
                 constants=("B",) if node.inputs[1] in graph.constants else ())


def _gemm_b(layer: Layer, b: np.ndarray) -> Arrays:
    return {"B": np.ascontiguousarray(b.T if layer.node.attribute("transB", 0) else b)}


def _gemm_weights(layer: Layer, graph: Graph) -> Arrays:
    name = layer.node.inputs[1]
    return _gemm_b(layer, graph.constants[name]) if name in graph.constants else {}


def _gemm_arrays(layer: Layer, graph: Graph, values: Mapping[str, np.ndarray], outputs: Outputs) -> Arrays:
    node = layer.node
    arrays = {"A": np.ascontiguousarray(values[node.inputs[0]]),
              "C": outputs("C", (layer.params["M"], layer.params["N"]))}
    arrays["C"][...] = 0  # the kernel adds into C
    return arrays if node.inputs[1] in graph.constants else {**arrays, **_gemm_b(layer, values[node.inputs[1]])}


def _gemm_output(layer: Layer, graph: Graph, arrays: Arrays, values: Mapping[str, np.ndarray]) -> np.ndarray:
    node, result = layer.node, arrays["C"]
    if node.op != "Gemm":
        return result
    result = result * np.float32(node.attribute("alpha", 1.0)) if node.attribute("alpha", 1.0) != 1.0 else result
    if len(node.inputs) > 2 and node.inputs[2]:
        result = result + np.float32(node.attribute("beta", 1.0)) * values[node.inputs[2]]
    return result


# --- pooling ---------------------------------------------------------------------------------------------


def _pool_layer(node: Node, graph: Graph) -> Layer:
    batch, channels, rows, columns = _image(graph, node)
    pad_r = 0
    if node.op == "GlobalAveragePool":
        if rows != columns:
            raise Unsupported(f"a {rows}x{columns} image: swauto's pooling windows are square")
        kernel, stride = rows, 1
    else:
        kernel_shape = tuple(node.attribute("kernel_shape"))
        if kernel_shape[0] != kernel_shape[1]:
            raise Unsupported(f"kernel_shape {list(kernel_shape)}: swauto's pooling windows are square")
        kernel = kernel_shape[0]
        stride, pad_r, pad_c = _conv_window(node, graph, kernel_shape)
        if pad_r != pad_c:
            raise Unsupported(f"pads {pad_r}x{pad_c}: swauto's pooling windows pad rows and columns alike")
        if pad_r and (node.op != "MaxPool" or not non_negative(graph, node.inputs[0])):
            raise Unsupported(f"pads {pad_r}x{pad_c}: maxpool.sw pads with zeros, the largest value only of an "
                              "input that is never negative (a ReLU's output); avgpool.sw reads no padding")
        if node.attribute("ceil_mode", 0):
            raise Unsupported("ceil_mode = 1: swauto's pooling windows end inside the image")
    _, _, out_rows, out_columns = graph.shapes[node.outputs[0]]
    params = {"B": batch, "C": channels, "Ri": rows, "Ci": columns, "K": kernel, "stride": stride}
    if node.op == "MaxPool" and pad_r:
        params["pad"] = pad_r
    flops = batch * channels * out_rows * out_columns * kernel * kernel
    return Layer(node, "maxpool.sw" if node.op == "MaxPool" else "avgpool.sw", params, flops,
                 f"{channels}, {rows}x{columns}, {kernel}x{kernel}/{stride}" + (f", pad {pad_r}" if pad_r else ""))


def non_negative(graph: Graph, name: str) -> bool:
    """Whether tensor `name` is the output of a ReLU or of a Clip from 0 (ReLU6), alone or fused into a
    convolution: never negative."""
    producer = next((node for node in graph.nodes if name in node.outputs), None)
    if producer is None:
        return False
    if producer.op == "FusedConv":
        return producer.attribute("activation") is not None
    if producer.op == "Clip":
        low = _clip_bounds(producer, graph)[0]
        return low is not None and low >= 0
    return producer.op == "Relu"


def _window_arrays(layer: Layer, graph: Graph, values: Mapping[str, np.ndarray], outputs: Outputs) -> Arrays:
    """A convolution's or pooling's input and output (seen in the declared 'hwcn' form; a pooling
    overwrites its output)."""
    node = layer.node
    batch, channels, rows, columns = graph.shapes[node.outputs[0]]
    return {"input": values[node.inputs[0]], "output": outputs("output", (rows, columns, channels, batch))}


# --- element-wise ----------------------------------------------------------------------------------------


def _batchnorm_layer(node: Node, graph: Graph) -> Layer:
    batch, channels, rows, columns = _image(graph, node)
    for index, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")):
        _weight(graph, node, index, what)
    return Layer(node, "batchnorm.sw", {"B": batch, "Ch": channels, "R": rows, "C": columns},
                 2 * batch * channels * rows * columns, f"{channels}, {rows}x{columns}")


def _batchnorm_weights(layer: Layer, graph: Graph) -> Arrays:
    node = layer.node
    gamma, beta, mean, variance = (graph.constants[name] for name in node.inputs[1:5])
    scale = (gamma / np.sqrt(variance + np.float32(node.attribute("epsilon", 1e-5)))).astype(np.float32)
    return {"scale": scale, "shift": (beta - mean * scale).astype(np.float32)}


def _x_to_y(layer: Layer, graph: Graph, values: Mapping[str, np.ndarray], outputs: Outputs) -> Arrays:
    """An operator of one input x and one output y of its shape, which it overwrites (batch norm, softmax)."""
    x = values[layer.node.inputs[0]]
    return {"x": x, "y": outputs("y", x.shape)}


def _returns(tensor: str) -> Callable[[Layer, Graph, Arrays, Mapping[str, np.ndarray]], np.ndarray]:
    """The `output` of a mapping whose node's output is the kernel's tensor `tensor`, as it is."""
    return lambda layer, graph, arrays, values: arrays[tensor]


def _clip_bounds(node: Node, graph: Graph) -> list[float | None]:
    """A Clip's bounds (None: not a constant), from its inputs (opset 11 on) or its attributes."""
    if len(node.inputs) > 1:
        return [float(graph.constants[name]) if name in graph.constants else None for name in node.inputs[1:3]]
    return [node.attribute("min"), node.attribute("max")]


def activation_of(node: Node, graph: Graph) -> str | None:
    """'relu' for a Relu, 'relu6' for a Clip between 0 and 6, None for any other node."""
    if node.op == "Relu":
        return "relu"
    return "relu6" if node.op == "Clip" and _clip_bounds(node, graph) == [0.0, 6.0] else None


def _flat_layer(node: Node, graph: Graph) -> Layer:
    shape = _input(graph, node, 0)
    if node.op == "Clip":
        if activation_of(node, graph) is None:
            raise Unsupported(f"Clip to {_clip_bounds(node, graph)}: swauto clips between 0 and 6 (ReLU6) only")
        return Layer(node, "relu6.sw", {"N": math.prod(shape)}, 2 * math.prod(shape), "x".join(map(str, shape)))
    if node.op == "Add":
        if any(name in graph.constants for name in node.inputs) or _input(graph, node, 1) != shape:
            raise Unsupported("it broadcasts or adds a weight; swauto's add.sw adds two activations of one shape")
        return Layer(node, "add.sw", {"N": math.prod(shape)}, math.prod(shape), "x".join(map(str, shape)))
    return Layer(node, "relu.sw", {"N": math.prod(shape)}, math.prod(shape), "x".join(map(str, shape)))


# The flat operators' input tensors (the node's first inputs: not Clip's bounds) and output tensor.
_FLAT_TENSORS = {"add.sw": (("x", "y"), "z"), "relu.sw": (("x",), "y"), "relu6.sw": (("x",), "y")}


def _flat_arrays(layer: Layer, graph: Graph, values: Mapping[str, np.ndarray], outputs: Outputs) -> Arrays:
    """The tensors in memory order (a copy only of an input held as a view); the kernel overwrites the output."""
    inputs, output = _FLAT_TENSORS[layer.operator]  # type: ignore[index]
    return {**{tensor: np.ascontiguousarray(values[name]).reshape(-1)
               for tensor, name in zip(inputs, layer.node.inputs, strict=False)},
            output: outputs(output, (layer.params["N"],))}


def _flat_output(layer: Layer, graph: Graph, arrays: Arrays, values: Mapping[str, np.ndarray]) -> np.ndarray:
    output = _FLAT_TENSORS[layer.operator][1]  # type: ignore[index]
    return arrays[output].reshape(values[layer.node.inputs[0]].shape)  # the input's form


def _softmax_layer(node: Node, graph: Graph) -> Layer:
    shape = _input(graph, node, 0)
    if len(shape) != 2 or node.attribute("axis", -1) not in (-1, 1):
        raise Unsupported(f"a softmax over axis {node.attribute('axis', -1)} of a {len(shape)}-D tensor: "
                          "swauto's softmax.sw normalizes the rows of a matrix")
    return Layer(node, "softmax.sw", {"B": shape[0], "N": shape[1]}, 5 * math.prod(shape), f"{shape[0]}x{shape[1]}")


# --- reshapes -----------------------------------------------------------------------------------------------


def _view_layer(node: Node, graph: Graph) -> Layer:
    return Layer(node, None, {}, 0, "x".join(map(str, graph.shapes[node.outputs[0]])))


def _view_arrays(layer: Layer, graph: Graph, values: Mapping[str, np.ndarray], outputs: Outputs) -> Arrays:
    return {}


def _view_output(layer: Layer, graph: Graph, arrays: Arrays, values: Mapping[str, np.ndarray]) -> np.ndarray:
    return values[layer.node.inputs[0]].reshape(graph.shapes[layer.node.outputs[0]])


CONV = OnnxMapping(_conv_layer, _conv_arrays, _returns("output"), _conv_weights, "hwcn", ("input", "output"))
GEMM = OnnxMapping(_gemm_layer, _gemm_arrays, _gemm_output, _gemm_weights)
POOL = OnnxMapping(_pool_layer, _window_arrays, _returns("output"), form="hwcn", activations=("input", "output"))
FLAT = OnnxMapping(_flat_layer, _flat_arrays, _flat_output, form="any")
VIEW = OnnxMapping(_view_layer, _view_arrays, _view_output)
MAPPINGS: dict[str, OnnxMapping] = {
    "Conv": CONV, "FusedConv": CONV, "Gemm": GEMM, "MatMul": GEMM,
    "MaxPool": POOL, "AveragePool": POOL, "GlobalAveragePool": POOL,
    "BatchNormalization": OnnxMapping(_batchnorm_layer, _x_to_y, _returns("y"), _batchnorm_weights, "hwcn", ("x", "y")),
    "Relu": FLAT, "Clip": FLAT, "Add": FLAT,
    "Softmax": OnnxMapping(_softmax_layer, _x_to_y, _returns("y")),
    "Flatten": VIEW, "Reshape": VIEW, "Identity": VIEW, "Dropout": VIEW,
}


def layer_of(node: Node, graph: Graph, form: str = ACTIVATION_FORM, winograd: bool = True) -> Layer:
    """The swauto operator of `node`, its activations held in memory `form` ('hwcn' or 'hwnc'), without
    Winograd's convolutions to weigh where not `winograd` (their transforms round more than the implicit
    convolution's sums); `Unsupported` (a sentence) when there is none."""
    mapping = MAPPINGS.get(node.op)
    if mapping is None:
        raise Unsupported(f"swauto has no operator for ONNX {node.op} (it maps {', '.join(sorted(MAPPINGS))})")
    if node.op == "Flatten" and node.attribute("axis", 1) != 1:
        raise Unsupported(f"Flatten at axis {node.attribute('axis')}: swauto keeps the batch as the first axis")
    layer = mapping.layer(node, graph)
    if not winograd and layer.alternatives:  # the Winograd forms
        layer = replace(layer, alternatives=())
    layout = tuple("hwcn".index(axis) for axis in form)
    return replace(layer, layouts={tensor: layout for tensor in mapping.activations})
