"""Whole models in: ONNX graphs read (`graph`), their nodes mapped to the operator library (`layers`),
and tuned layer by layer (`tune`)."""

from swauto.models.graph import Graph, Node, load_onnx
from swauto.models.tune import LayerTuning, ModelTuning, tune_model

__all__ = ["Graph", "LayerTuning", "ModelTuning", "Node", "load_onnx", "tune_model"]
