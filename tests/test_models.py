"""Whole ONNX models in (`swauto.models`, `swauto tune-model`): small models built with onnx.helper,
every compiled layer checked against onnxruntime running the same node."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402 - after the skip
from test_host_model import _stored_fields, _write_calibration, quiet_machine  # noqa: E402

import swauto  # noqa: E402
from swauto.cli import main  # noqa: E402
from swauto.models import load_onnx, tune_model  # noqa: E402
from swauto.models.layers import _residual  # noqa: E402

TOLERANCE = 1e-4


class _Builder:
    """Nodes and random weights of a small model."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.weights: list = []

    def weight(self, name: str, shape: tuple[int, ...], low: float | None = None) -> str:
        values = (self.rng.uniform(low, 1.5, shape) if low is not None else 0.2 * self.rng.standard_normal(shape))
        self.weights.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, name: str, **attributes) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attributes))
        return output

    def conv(self, x: str, ci: int, co: int, k: int, name: str, stride: int = 1, pad: int = 1, group: int = 1,
             bias: bool = True, **attributes) -> str:
        inputs = [x, self.weight(name + ".w", (co, ci // group, k, k))] + ([self.weight(name + ".b", (co,))]
                                                                          if bias else [])
        return self.node("Conv", inputs, name, name, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         group=group, **attributes)

    def model(self, name: str, shape: list, output: str, output_shape: list) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, output_shape)],
                                  self.weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def tiny_network(channels: int = 8, hw: int = 12, classes: int = 10) -> onnx.ModelProto:
    """A small residual network with a depthwise layer, in NCHW with a symbolic batch: conv + bias, ReLU,
    max pooling, a batch norm of the pooling (not foldable), a residual block (conv, batch norm: folded
    into the conv, Add, ReLU) twice with the same shapes, a depthwise conv, a stride-2 conv, global
    average pooling, Flatten, a fully connected layer (Gemm, transB) and softmax."""
    b = _Builder()
    x = b.node("Relu", [b.conv("x", 3, channels, 3, "conv1")], "relu1", "relu1")
    x = b.node("MaxPool", [x], "pool1", "pool1", kernel_shape=[2, 2], strides=[2, 2])
    statistics = [b.weight(f"bn_pool.{s}", (channels,)) for s in ("scale", "bias", "mean")]
    x = b.node("BatchNormalization", [x, *statistics, b.weight("bn_pool.var", (channels,), low=0.5)], "bn_pool",
               "bn_pool")
    for block in ("a", "b"):
        y = b.conv(x, channels, channels, 3, f"conv_{block}", bias=False)
        statistics = [b.weight(f"bn_{block}.{s}", (channels,)) for s in ("scale", "bias", "mean")]
        y = b.node("BatchNormalization", [y, *statistics, b.weight(f"bn_{block}.var", (channels,), low=0.5)],
                   f"bn_{block}", f"bn_{block}")
        x = b.node("Relu", [b.node("Add", [y, x], f"add_{block}", f"add_{block}")], f"relu_{block}", f"relu_{block}")
    x = b.conv(x, channels, channels, 3, "depthwise", group=channels)
    x = b.conv(x, channels, 2 * channels, 3, "down", stride=2)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap", "gap")], "flat", "flat", axis=1)
    x = b.node("Gemm", [x, b.weight("fc.w", (classes, 2 * channels)), b.weight("fc.b", (classes,))], "fc", "fc",
               transB=1)
    x = b.node("Softmax", [x], "y", "softmax", axis=1)
    return b.model("tiny_network", ["N", 3, hw, hw], "y", ["N", classes])


def test_every_layer_of_a_small_network_compiles_and_matches_onnxruntime():
    tuning = tune_model(tiny_network(), batch=2, repeat=1, jobs=1)
    by_node = {node: layer for layer in tuning.layers for node in layer.nodes}
    # The two residual blocks have one shape: one kernel for their conv, Add and ReLU, fused (the
    # batch norms folded into the convs); the one after the pooling is a kernel of its own.
    assert by_node["conv_a"] is by_node["conv_b"] and by_node["conv_a"].nodes == ("conv_a", "conv_b")
    assert by_node["conv_a"].op == "FusedConv" and by_node["conv_a"].operator == "conv2d_relu.sw"
    assert by_node["conv_a"].shape.endswith("+ add + relu") and by_node["conv1"].shape.endswith("+ relu")
    assert by_node["conv1"].operator == "conv2d_bias_relu.sw"  # a first layer overwrites, its bias in the kernel
    assert not {"bn_a", "add_a", "relu_a", "relu1"} & set(by_node) and by_node["bn_pool"].operator == "batchnorm.sw"
    assert by_node["flat"].status == "no kernel"
    compiled = [layer for layer in tuning.layers if layer.status == "ok"]
    assert len(compiled) == len(tuning.layers) - 1
    for layer in compiled:
        assert layer.error is not None and layer.error <= TOLERANCE, (layer.nodes, layer.error)
        assert layer.seconds > 0 and layer.onnxruntime_s > 0 and layer.candidate_id
    assert by_node["depthwise"].operator == "conv2d_depthwise.sw" and by_node["fc"].numpy == "bias"
    assert by_node["down"].params["stride"] == 2 and by_node["gap"].params["K"] == 3
    table = tuning.table()
    assert table.count("\n") == len(tuning.layers) + 1 and "conv_a (+1)" in table
    assert "9 compiled for host at batch 2" in tuning.summary()  # 10 distinct layers, Flatten has no kernel


def test_the_sw26010_tunes_every_layer_on_its_timed_simulator():
    tuning = tune_model(tiny_network(hw=8), target="sw26010", batch=1, jobs=1)
    compiled = [layer for layer in tuning.layers if layer.status == "ok"]
    assert len(compiled) == len(tuning.layers) - 1
    assert all(0 < layer.peak_fraction < 1 and layer.onnxruntime_s is None for layer in compiled)


def test_nodes_swauto_cannot_compile_are_listed_with_the_reason():
    b = _Builder()
    x = b.conv("x", 4, 4, 3, "dilated", dilations=[2, 2], pad=2)
    x = b.node("MaxPool", [x], "padded_pool", "padded_pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    x = b.node("Sigmoid", [x], "sigmoid", "sigmoid")
    x = b.conv(x, 4, 4, 1, "grouped", pad=0, group=2)
    x = b.node("Relu", [x], "y", "relu")
    tuning = tune_model(b.model("refused", [1, 4, 8, 8], "y", [1, 4, 4, 4]), repeat=1, jobs=1)
    status = {layer.nodes[0]: layer.status for layer in tuning.layers}
    assert "dilations [2, 2]" in status["dilated"] and "pads 1x1" in status["padded_pool"]
    assert "no operator for ONNX Sigmoid" in status["sigmoid"] and "group = 2" in status["grouped"]
    assert status["relu"] == "ok" and "4 not compiled" in tuning.summary()
    # A 1-D convolution (a 3-D input) is refused the same way, not a crash.
    b = _Builder()
    b.node("Conv", ["x", b.weight("w", (4, 4, 3))], "y", "conv1d", kernel_shape=[3], pads=[1, 1])
    tuning = tune_model(b.model("conv1d", [1, 4, 8], "y", [1, 4, 8]), repeat=1, jobs=1)
    assert "its input is 3-D" in tuning.layers[0].status


def test_a_model_that_cannot_be_read_is_one_clear_error(tmp_path):
    with pytest.raises(swauto.ModelError, match="no such ONNX file"):
        load_onnx(tmp_path / "missing.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"\x00 not a protobuf \xff" * 10)
    with pytest.raises(swauto.ModelError, match="is not an ONNX model"):
        load_onnx(tmp_path / "bad.onnx")
    with pytest.raises(swauto.ModelError, match="symbolic batch dimension 'N'"):
        load_onnx(tiny_network())
    with pytest.raises(swauto.ArgumentError, match="batch must be a positive integer"):
        tune_model(tiny_network(), batch=0)
    with pytest.raises(swauto.ArgumentError, match="not 'simulate'"):
        tune_model(tiny_network(), batch=1, tuner="simulate")


def test_the_command_line_prints_the_table_and_draws_the_plot(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_network(hw=8), str(path))
    once = ["-D", "batch=1", "--repeat", "1", "--jobs", "1"]  # tuned in this process (the pool has its own tests)
    assert main(["tune-model", str(path), *once, "--plot", str(tmp_path / "t.png")]) == 0
    out = capsys.readouterr().out
    assert "| conv1 | FusedConv |" in out and "9 compiled for host at batch 1" in out
    assert (tmp_path / "t.png").stat().st_size > 0
    assert main(["tune-model", str(path), *once, "--no-compare", "--no-winograd"]) == 0
    assert "| conv1 | FusedConv |" in capsys.readouterr().out
    assert main(["tune-model", str(path), "-D", "B=1"]) == 2
    assert "takes one parameter, -D batch=N" in capsys.readouterr().err
    assert main(["tune-model", str(path)]) == 2
    assert "give the batch" in capsys.readouterr().err


@pytest.mark.parametrize("network", ["resnet18", "mobilenet_v2"])
def test_a_whole_network_runs_on_swauto_kernels_as_onnxruntime_runs_it(network):
    """torchvision's ResNet-18 and MobileNetV2 shapes (random weights, 32 x 32 images, 10 classes):
    every node on a swauto kernel (MaxPool after a ReLU zero-padded, ReLU6 as clamp), the outputs within
    1e-4 of onnxruntime's, relative to their largest."""
    import onnxruntime

    from swauto.models import zoo

    proto = getattr(zoo, network)(image=32, classes=10)
    model = swauto.Model(proto, batch=2, jobs=1)
    assert all(layer.operator is not None or layer.node.op == "Flatten" for layer in model.layers)
    bias_kernel = {"resnet18": "conv2d_bias_relu.sw", "mobilenet_v2": "conv2d_bias_relu6.sw"}[network]
    assert model.layers[0].operator == bias_kernel  # 3 channels: overwrites its output, the bias in the kernel
    # So does every dense layer with its activation, no residual and no Winograd form (MobileNetV2's
    # expansions and head; ResNet-18's first convs of its downsampling blocks); the others add into
    # the output NumPy starts from the bias (and residual).
    for layer in model.layers:
        if layer.node.op in ("Conv", "FusedConv") and layer.params.get("Ni") is not None:
            expected = layer.node.attribute("activation") is not None and not _residual(layer.node) \
                and not layer.alternatives
            assert (layer.operator == bias_kernel) == expected, (layer.node.name, layer.operator)
    assert sum(layer.operator == bias_kernel for layer in model.layers) > 1
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32), dtype=np.float32)
    ours = model(input=x)["fc"]
    session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"input": x})[0]
    assert np.abs(ours - theirs).max() <= TOLERANCE * np.abs(theirs).max()


def test_each_layer_runs_on_the_threads_the_model_predicts_faster(monkeypatch):
    """A model's layers run on one core or on all it may use as the host model predicts each call faster
    (a layer too small to share on one); `threads` bounds them. (A made-up calibration: a disturbed one,
    a share-out measured at milliseconds, puts every layer on one core.)"""
    from swauto import targets
    from swauto.api import available_threads
    from swauto.tuner import host_model

    calibration = quiet_machine("made-up")
    monkeypatch.setattr(host_model, "machine", lambda cache_dir=None: calibration)

    cores = available_threads()
    if cores < 2:
        pytest.skip("one core: nothing to decide")
    plugin = targets.get("host")
    network = tiny_network(channels=16, hw=24)
    decided = swauto.Model(network, batch=1, jobs=1)
    threads = {}
    for key, kernel in decided.kernels.items():
        alone, shared = (plugin.estimate(kernel.stages, t).seconds for t in (1, cores))
        assert kernel.threads == (1 if alone <= shared else cores), key
        threads[key] = kernel.threads
    assert set(threads.values()) == {1, cores}  # calls of both kinds at these sizes
    given = swauto.Model(network, batch=1, threads=cores, jobs=1)
    assert {key: kernel.threads for key, kernel in given.kernels.items()} == threads
    assert {kernel.threads for kernel in swauto.Model(network, batch=1, threads=1, jobs=1).kernels.values()} == {1}
    x = np.random.default_rng(2).standard_normal((1, 3, 24, 24), dtype=np.float32)
    np.testing.assert_allclose(decided(x=x)["y"], given(x=x)["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_3x3_layer_weighs_winograd_and_runs_it_on_filters_transformed_once(algorithm, monkeypatch):
    """A dense 3 x 3 convolution at stride 1 of more than 32 channels is chosen among the implicit
    convolution and Winograd's F(2x2) and F(4x4) (with its activation; the output starting from the
    bias, and the residual); the choice is forced here (`algorithm`: which of `Layer.sources`), so that
    the Winograd kernel runs: its filter transform prepared once for the model, an odd image cropped,
    the outputs within 1e-4 of onnxruntime's."""
    import onnxruntime

    b = _Builder()
    x = b.node("Relu", [b.conv("x", 40, 40, 3, "conv_a")], "relu_a", "relu_a")
    y = b.conv(x, 40, 40, 3, "conv_b")
    b.node("Relu", [b.node("Add", [y, x], "add_b", "add_b")], "y", "relu_b")
    proto = b.model("winograd", [2, 40, 6, 7], "y", [2, 40, 6, 7])
    sources = ("conv2d_relu.sw", "conv2d_winograd_relu.sw", "conv2d_winograd4_relu.sw")
    monkeypatch.setattr(swauto, "choose", lambda sources, params, **options: swauto.compile(
        sources[algorithm], params, **options))
    model = swauto.Model(proto, jobs=1)
    assert [layer.sources for layer in model.layers] == [sources] * 2  # conv + relu, conv + add + relu
    (kernel,) = model.kernels.values()
    assert kernel.operator.name == sources[algorithm].removesuffix(".sw") and kernel.prologue is not None
    x = np.random.default_rng(1).standard_normal((2, 40, 6, 7), dtype=np.float32)
    theirs = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    for _ in range(2):  # the prepared filters serve every call
        assert np.abs(model(x=x)["y"] - theirs).max() <= TOLERANCE * np.abs(theirs).max()


def test_without_winograd_a_3x3_layer_runs_on_the_implicit_convolution(monkeypatch):
    """`Model(winograd=False)`: the layers that would weigh Winograd's forms take the implicit convolution
    alone, with no prologue (their weights arranged, not transformed), and compute as onnxruntime does;
    `tune_model` alike. (`choose` is made to keep F(2x2) here, so that a layer that still weighed Winograd
    would show it.)"""
    import onnxruntime

    monkeypatch.setattr(swauto, "choose", lambda sources, params, **options: swauto.compile(
        sources[1], params, **options))
    b = _Builder()
    b.node("Relu", [b.conv("x", 40, 40, 3, "conv_a")], "y", "relu_a")
    proto = b.model("implicit", [1, 40, 5, 6], "y", [1, 40, 5, 6])
    model = swauto.Model(proto, jobs=1, winograd=False)
    assert [layer.sources for layer in model.layers] == [("conv2d_relu.sw",)]
    (kernel,) = model.kernels.values()
    assert kernel.operator.name == "conv2d_relu" and kernel.prologue is None
    x = np.random.default_rng(2).standard_normal((1, 40, 5, 6), dtype=np.float32)
    theirs = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.abs(model(x=x)["y"] - theirs).max() <= TOLERANCE * np.abs(theirs).max()
    tuning = tune_model(proto, repeat=1, compare=False, jobs=1, winograd=False)  # `tune-model --no-winograd`
    assert [row.operator for row in tuning.layers] == ["conv2d_relu.sw"]


def test_a_model_refuses_what_it_cannot_run_in_one_sentence():
    b = _Builder()
    b.node("Sigmoid", ["x"], "y", "sigmoid")
    with pytest.raises(swauto.ModelError, match="node sigmoid \\(Sigmoid\\) cannot run on swauto"):
        swauto.Model(b.model("sigmoid", [1, 4], "y", [1, 4]))
    model = swauto.Model(tiny_network(hw=8), batch=1, jobs=1)
    with pytest.raises(swauto.ArgumentError, match="missing input x"):
        model()
    with pytest.raises(swauto.ArgumentError, match="has shape \\(2, 3, 8, 8\\); expected \\(1, 3, 8, 8\\)"):
        model(x=np.zeros((2, 3, 8, 8), np.float32))
    with pytest.raises(swauto.ArgumentError, match="is float64; the model takes float32"):
        model(x=np.zeros((1, 3, 8, 8)))


def test_a_model_takes_any_array_that_speaks_dlpack():
    class Foreign:  # another library's array, seen through DLPack only
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, **kwargs):
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    model = swauto.Model(tiny_network(hw=8), batch=1, jobs=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8), dtype=np.float32)
    assert np.array_equal(model(x=Foreign(x))["y"], model(x=x)["y"])


def _tune_or_die(sources: tuple[str, ...], *task) -> tuple[list, float]:
    """A pool worker that dies (as a killed process does) on the ReLU layers and tunes the others."""
    import os
    import time

    from swauto.models.tune import _tune_one

    if "operator relu(" in sources[0]:
        from swauto.cache import cache_dir

        log = cache_dir() / "tuning.jsonl"
        # Until another worker has finished a layer (the first conv, submitted before the first ReLU).
        # With 60 s the test failed under the full suite on two cores, no layer kept, and passed alone:
        # most likely the wait gave up first. The deadline only guards against a hang.
        deadline = time.monotonic() + 300
        while not (log.exists() and log.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(1)
    return _tune_one(sources, *task)


@pytest.mark.parametrize("dies", [False, True])
def test_layers_are_tuned_in_a_process_pool_and_a_dead_worker_loses_no_finished_layer(dies, tmp_path, monkeypatch):
    from swauto.models.layers import layer_of
    from swauto.models.tune import tune_layers

    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))  # a tuning log of this test's own
    # One stored calibration for every process: on a loaded machine each would measure its own, which
    # is not stored (by design), and the log's keys would differ between them.
    _write_calibration(tmp_path, _stored_fields())
    graph = load_onnx(tiny_network(hw=8), batch=1)
    layers = [layer for layer in (layer_of(node, graph) for node in graph.nodes) if layer.operator]
    distinct = {layer.key: layer for layer in layers}
    tuned = tune_layers(layers, "host", 1, "model", jobs=2, worker=_tune_or_die if dies else None)
    relu = {key for key, layer in distinct.items() if layer.operator == "relu.sw"}
    assert set(tuned) <= set(distinct) - relu if dies else set(tuned) == set(distinct)
    remembered = set()
    for key, layer in distinct.items():  # what a worker finished is in the log; the rest is tuned here
        kernel = layer.compile("host", 1, "model")
        if kernel.report["from_tuning_log"]:
            remembered.add(key)
    # Every layer a worker finished is kept, also one whose result the broken pool did not deliver.
    assert set(tuned) <= remembered and remembered and not relu & remembered if dies else remembered == set(distinct)


def test_a_batch_norm_is_folded_only_into_a_convolution_nothing_else_reads():
    from swauto.models.rewrite import fold_batch_norms

    b = _Builder()
    conv = b.conv("x", 4, 4, 3, "conv")
    statistics = [b.weight(f"bn.{s}", (4,)) for s in ("scale", "bias", "mean")] + [b.weight("bn.var", (4,), low=0.5)]
    normed = b.node("BatchNormalization", [conv, *statistics], "bn", "bn")
    b.node("Add", [normed, b.node("Relu", [conv], "relu", "relu")], "y", "add")  # the conv is read twice
    graph = load_onnx(b.model("shared", [1, 4, 6, 6], "y", [1, 4, 6, 6]))
    assert fold_batch_norms(graph) == graph
    single = load_onnx(tiny_network(hw=8), batch=1)
    folded = fold_batch_norms(single)
    assert [n.op for n in folded.nodes].count("BatchNormalization") == 1  # bn_pool follows a MaxPool
    assert {n.name for n in folded.nodes} == {n.name for n in single.nodes} - {"bn_a", "bn_b"}


def test_layers_are_tuned_on_a_dask_cluster_and_recorded_here(tmp_path, monkeypatch):
    """A local Dask cluster of two worker processes (a cluster at another address works alike): the
    workers return their choices and this process records them in its own tuning log."""
    distributed = pytest.importorskip("distributed")
    from swauto.models import tune
    from swauto.models.layers import layer_of
    from swauto.models.tune import tune_layers

    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))
    graph = load_onnx(tiny_network(hw=8), batch=1)
    layers = [layer for layer in (layer_of(node, graph) for node in graph.nodes) if layer.operator]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        tuned = tune_layers(layers, "sw26010", 1, "model", jobs=1, cluster=cluster.scheduler_address)
    assert set(tuned) == {layer.key for layer in layers}
    for layer in layers:
        kernel = layer.compile("sw26010", 1, "model")
        assert kernel.report["from_tuning_log"]
    monkeypatch.setattr(tune, "CONNECT_SECONDS", 1)
    with pytest.raises(swauto.ModelError, match="cannot reach the Dask cluster"):
        tune_layers(layers, "sw26010", 1, "model", jobs=1, cluster="tcp://127.0.0.1:9")


def test_a_model_keeps_its_activations_in_one_layout_and_its_results_are_the_callers():
    """Every window kernel is pinned to the model's activation form (nothing is converted between
    them), and the arrays a call returns are not the ones the next call writes."""
    from swauto.models.layers import ACTIVATION_FORM, MAPPINGS

    model = swauto.Model(tiny_network(hw=8), batch=2, jobs=1)
    layout = tuple("hwcn".index(axis) for axis in ACTIVATION_FORM)
    windows = [layer for layer in model.layers if MAPPINGS[layer.node.op].activations]
    assert {layer.node.op for layer in windows} >= {"Conv", "MaxPool", "BatchNormalization"}
    for layer in windows:
        kernel = model.kernels[layer.key]
        assert all(kernel.layouts.get(tensor, (0, 1, 2, 3)) == layout for tensor in MAPPINGS[layer.node.op].activations)
    rng = np.random.default_rng(2)
    x1, x2 = (rng.standard_normal((2, 3, 8, 8), dtype=np.float32) for _ in range(2))
    first = model(x=x1)["y"]
    kept = first.copy()
    second = model(x=x2)["y"]
    assert np.array_equal(first, kept) and not np.array_equal(first, second)
    assert np.array_equal(model(x=x1)["y"], kept)


def test_activations_and_residuals_fuse_into_the_convolution_before_them_where_nothing_else_reads_it():
    """`fuse_activations`: Conv [-> Add] [-> Relu | Clip(0, 6)] chains whose every link has one reader
    become FusedConv nodes (one kernel: the activation on its output tiles), the rest stay; the model
    still computes what onnxruntime does."""
    import onnxruntime

    from swauto.models.rewrite import fuse_activations

    b = _Builder()
    a = b.conv("x", 4, 4, 3, "a")
    shared = b.node("Relu", [a], "shared", "relu_read_twice")  # fused: a's output has one reader
    c = b.conv(shared, 4, 4, 1, "c", pad=0)
    d = b.conv(shared, 4, 4, 3, "d", group=4)  # depthwise, its Clip(0, 6) fused
    clipped = b.node("Clip", [d, b.weight("zero", ()), b.weight("six", ())], "clipped", "relu6")
    b.weights[-2:] = [numpy_helper.from_array(np.float32(v), n) for v, n in ((0, "zero"), (6, "six"))]
    summed = b.node("Add", [c, clipped], "summed", "add")  # c (first in order) takes the Add and its ReLU
    e = b.conv(b.node("Relu", [summed], "r", "relu_after_add"), 4, 4, 3, "e")
    y = b.node("Add", [b.node("Relu", [e], "g", "relu_of_e"), e], "y", "add_of_e")  # e is read twice
    proto = b.model("fusions", [2, 4, 6, 6], y, [2, 4, 6, 6])
    graph = fuse_activations(load_onnx(proto))
    fused = {node.name: [part.name for part in node.parts] for node in graph.nodes if node.op == "FusedConv"}
    assert fused == {"a": ["a", "relu_read_twice"], "d": ["d", "relu6"], "c": ["c", "add", "relu_after_add"]}
    assert [node.name for node in graph.nodes if node.op != "FusedConv"] == ["e", "relu_of_e", "add_of_e"]
    other = _Builder()  # a Clip that is no ReLU6 is not fused
    clip = other.node("Clip", [other.conv("x", 4, 4, 3, "conv"), other.weight("low", ()), other.weight("high", ())],
                      "y", "clip_to_one")
    other.weights[-2:] = [numpy_helper.from_array(np.float32(v), n) for v, n in ((-1, "low"), (1, "high"))]
    assert [n.op for n in fuse_activations(load_onnx(other.model("clip", [2, 4, 6, 6], clip, [2, 4, 6, 6]))).nodes] \
        == ["Conv", "Clip"]
    assert [node.attribute("activation") for node in graph.nodes[:3]] == ["relu", "relu6", "relu"]
    model = swauto.Model(proto, batch=2, jobs=1)
    assert {layer.operator for layer in model.layers} >= {"conv2d_relu.sw", "conv2d_depthwise_relu6.sw"}
    x = np.random.default_rng(3).standard_normal((2, 4, 6, 6), dtype=np.float32)
    theirs = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.abs(model(x=x)["y"] - theirs).max() <= TOLERANCE * np.abs(theirs).max()
    # Each fused layer against onnxruntime running the nodes it stands for.
    layers = [layer for layer in tune_model(proto, batch=2, repeat=1, jobs=1).layers if layer.op == "FusedConv"]
    assert len(layers) == 3 and all(layer.error <= TOLERANCE for layer in layers)
