"""ONNX graphs of known networks with random weights, built with onnx.helper (nothing is downloaded):
for trying `swauto tune-model` and `swauto.Model`, for the tests and the benchmarks.

`resnet18` and `mobilenet_v2` follow torchvision's architectures (ImageNet: 224 x 224 inputs, 1000
classes), with the batch symbolic (`N`); `image` and `classes` make smaller ones of the same shape.
Batch normalization follows every convolution, as exported for inference before folding.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class _Graph:
    """Nodes and random weights of a network under construction."""

    def __init__(self, seed: int) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.weights: list[Any] = []

    def _weight(self, name: str, values: np.ndarray) -> str:
        self.weights.append(self.numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attributes: Any) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [name], name=name, **attributes))
        return name

    def conv_bn(self, x: str, ci: int, co: int, k: int, name: str, stride: int = 1, group: int = 1,
                relu: bool = True, relu6: bool = False) -> str:
        """Conv (He-initialized, no bias) then BatchNormalization, then ReLU (or ReLU6 as Clip) if asked."""
        fan_in = ci // group * k * k
        weight = self._weight(f"{name}.weight", self.rng.standard_normal((co, ci // group, k, k))
                              * np.sqrt(2.0 / fan_in))
        y = self.node("Conv", [x, weight], name, kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4, group=group)
        statistics = [self._weight(f"{name}.bn.scale", self.rng.uniform(0.5, 1.5, co)),
                      self._weight(f"{name}.bn.bias", 0.1 * self.rng.standard_normal(co)),
                      self._weight(f"{name}.bn.mean", 0.1 * self.rng.standard_normal(co)),
                      self._weight(f"{name}.bn.var", self.rng.uniform(0.5, 1.5, co))]
        y = self.node("BatchNormalization", [y, *statistics], f"{name}.bn")
        if relu6:
            bounds = [self._weight(f"{name}.clip.min", np.array(0.0)), self._weight(f"{name}.clip.max", np.array(6.0))]
            return self.node("Clip", [y, *bounds], f"{name}.relu6")
        return self.node("Relu", [y], f"{name}.relu") if relu else y

    def classifier(self, x: str, channels: int, classes: int) -> str:
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
        weight = self._weight("fc.weight", self.rng.standard_normal((classes, channels)) / np.sqrt(channels))
        return self.node("Gemm", [x, weight, self._weight("fc.bias", np.zeros(classes))], "fc", transB=1)

    def model(self, name: str, image: int, classes: int, output: str) -> Any:
        from onnx import TensorProto

        helper = self.helper
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, image, image])],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", classes])], self.weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def resnet18(image: int = 224, classes: int = 1000, seed: int = 0) -> Any:
    """torchvision's ResNet-18 (basic blocks [2, 2, 2, 2]) as an onnx.ModelProto, random weights."""
    g = _Graph(seed)
    x = g.conv_bn("input", 3, 64, 7, "conv1", stride=2)
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            name, stride = f"layer{stage}.{block}", 2 if stage > 1 and block == 0 else 1
            y = g.conv_bn(x, channels, width, 3, f"{name}.conv1", stride=stride)
            y = g.conv_bn(y, width, width, 3, f"{name}.conv2", relu=False)
            shortcut = x if stride == 1 and channels == width else \
                g.conv_bn(x, channels, width, 1, f"{name}.downsample", stride=stride, relu=False)
            x = g.node("Relu", [g.node("Add", [y, shortcut], f"{name}.add")], f"{name}.relu")
            channels = width
    return g.model("resnet18", image, classes, g.classifier(x, channels, classes))


def mobilenet_v2(image: int = 224, classes: int = 1000, seed: int = 0) -> Any:
    """torchvision's MobileNetV2 (width 1.0) as an onnx.ModelProto, random weights: inverted residual
    blocks of a 1 x 1 expansion, a 3 x 3 depthwise conv and a 1 x 1 projection, ReLU6 as Clip."""
    g = _Graph(seed)
    x = g.conv_bn("input", 3, 32, 3, "features.0", stride=2, relu6=True)
    channels, index = 32, 1
    for expand, width, repeats, first_stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                                 (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for repeat in range(repeats):
            name, stride = f"features.{index}", first_stride if repeat == 0 else 1
            hidden = channels * expand
            y = x if expand == 1 else g.conv_bn(x, channels, hidden, 1, f"{name}.expand", relu6=True)
            y = g.conv_bn(y, hidden, hidden, 3, f"{name}.depthwise", stride=stride, group=hidden, relu6=True)
            y = g.conv_bn(y, hidden, width, 1, f"{name}.project", relu=False)
            x = g.node("Add", [y, x], f"{name}.add") if stride == 1 and channels == width else y
            channels, index = width, index + 1
    x = g.conv_bn(x, channels, 1280, 1, f"features.{index}", relu6=True)
    return g.model("mobilenet_v2", image, classes, g.classifier(x, 1280, classes))
