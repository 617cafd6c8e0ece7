"""Whole models in: ONNX graphs read (`graph`), their nodes mapped to the operator library (`layers`),
tuned layer by layer (`tune`) and run (`run`); `zoo` builds known networks with random weights."""

from swauto.models.graph import Graph, Node, load_onnx
from swauto.models.run import Model
from swauto.models.tune import LayerTuning, ModelTuning, tune_model

__all__ = ["Graph", "LayerTuning", "Model", "ModelTuning", "Node", "load_onnx", "tune_model"]
