"""Tune a whole ONNX model layer by layer, as `Model` runs it (batch norms folded into convolutions,
activations and residual adds fused into them, activations pinned to the model's layout): each
distinct layer shape is compiled once (a model's repeated blocks share their kernel), timed, and, on
the host, checked and timed against the same node (a fused node's ONNX nodes) run alone by
onnxruntime (where installed).

Per layer: the swauto operator and its sizes, the chosen candidate, the tuning time, the kernel's time
(on the host the median of `repeat` calls on arrays already in its layouts, as a framework hands them
over; on the SW26010 the timed simulator's), its GFLOPS and percent of the target's peak, onnxruntime's
median time for the node alone and the ratio, and the largest error of the node's output (NumPy's part
included) against onnxruntime's, relative to its largest value. A node swauto cannot compile is listed
with the reason, never dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from swauto import targets
from swauto.errors import ArgumentError, ModelError, SwautoError
from swauto.models.graph import Graph, Node, load_onnx
from swauto.models.layers import (
    MAPPINGS,
    Layer,
    Outputs,
    Unsupported,
    arranged,
    bind,
    compile_layer,
    in_form,
    layer_of,
    library,
    non_negative,
    run,
    to_form,
)
from swauto.models.rewrite import rewritten
from swauto.tuner import database
from swauto.tuner.measure import median_seconds

Tuned = tuple[list[database.Record], float]  # what a worker tuned (`_tune_one`)


@dataclass
class LayerTuning:
    """One distinct layer of a model (see the module docstring); `nodes` are every node of its shape."""

    nodes: tuple[str, ...]
    op: str
    shape: str
    operator: str = "-"
    params: Mapping[str, int] = field(default_factory=dict)
    status: str = "ok"  # "ok", "no kernel" (a reshape), or why it did not compile
    candidate: str = ""  # the chosen candidate, described
    candidate_id: str = ""
    numpy: str = ""
    flops: int = 0
    tuning_s: float | None = None
    seconds: float | None = None
    peak_fraction: float | None = None
    onnxruntime_s: float | None = None
    error: float | None = None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.seconds / 1e9 if self.seconds and self.flops else None

    @property
    def speedup(self) -> float | None:
        """onnxruntime's time over swauto's: above 1, swauto is faster."""
        return self.onnxruntime_s / self.seconds if self.onnxruntime_s and self.seconds else None


@dataclass
class ModelTuning:
    """What `tune_model` measured: one `LayerTuning` per distinct layer, in the model's order."""

    model: str
    target: str
    batch: int
    threads: int
    layers: list[LayerTuning]

    def total_seconds(self, which: str = "seconds") -> float:
        """The model's time as the sum over its nodes (each distinct layer times its nodes) of the
        compiled layers' `which` ("seconds" or "onnxruntime_s")."""
        return sum(len(layer.nodes) * (getattr(layer, which) or 0.0) for layer in self.layers)

    def table(self) -> str:
        """The per-layer table, as Markdown."""
        head = ("| nodes | op | shape | swauto operator | candidate | tuning s | swauto ms | GFLOPS | % of peak | "
                "onnxruntime ms | onnxruntime / swauto | error |")
        rows = [head, "|" + "---|" * (head.count("|") - 1)]
        for layer in self.layers:
            names = layer.nodes[0] + (f" (+{len(layer.nodes) - 1})" if len(layer.nodes) > 1 else "")
            operator = layer.operator + (f" + {layer.numpy} in NumPy" if layer.numpy else "")
            params = " ".join(f"{k}={v}" for k, v in layer.params.items())
            if layer.status != "ok":
                rows.append(f"| {names} | {layer.op} | {layer.shape} | {operator} {params} | {layer.status} |"
                            + " |" * 7)
                continue
            rows.append(" ".join([
                f"| {names} | {layer.op} | {layer.shape} | {operator} {params} | {layer.candidate_id} |",
                _cell(layer.tuning_s, "{:.2f}"), _cell(layer.seconds and 1e3 * layer.seconds, "{:.3f}"),
                _cell(layer.gflops, "{:.1f}"), _cell(layer.peak_fraction and 100 * layer.peak_fraction, "{:.1f}"),
                _cell(layer.onnxruntime_s and 1e3 * layer.onnxruntime_s, "{:.3f}"), _cell(layer.speedup, "{:.2f}x"),
                _cell(layer.error, "{:.1e}")]))
        return "\n".join(rows)

    def summary(self) -> str:
        """One sentence: layers compiled, the model's time by its layers, against onnxruntime's."""
        compiled = [layer for layer in self.layers if layer.status == "ok"]
        refused = [layer for layer in self.layers if layer.status not in ("ok", "no kernel")]
        text = (f"{self.model}: {len(self.layers)} distinct layers ({sum(len(x.nodes) for x in self.layers)} nodes), "
                f"{len(compiled)} compiled for {self.target} at batch {self.batch} on {self.threads} thread(s)")
        if refused:
            text += f", {len(refused)} not compiled ({', '.join(layer.nodes[0] for layer in refused)})"
        ours, theirs = self.total_seconds(), self.total_seconds("onnxruntime_s")
        text += f"; the compiled layers take {1e3 * ours:.3f} ms"
        if theirs:
            text += f" (onnxruntime, node by node: {1e3 * theirs:.3f} ms, {theirs / ours:.2f}x)"
        return text

    def plot(self, path: str | Path) -> Path:
        """A bar chart of each compiled layer's GFLOPS, swauto beside onnxruntime, written to `path`."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        shown = [layer for layer in self.layers if layer.gflops]
        figure, axis = plt.subplots(figsize=(max(6.0, 0.45 * len(shown) + 2), 4.5))
        x = np.arange(len(shown))
        axis.bar(x - 0.2, [layer.gflops for layer in shown], 0.4, label=f"swauto ({self.target})")
        if any(layer.onnxruntime_s for layer in shown):
            theirs = [layer.flops / layer.onnxruntime_s / 1e9 if layer.onnxruntime_s else 0 for layer in shown]
            axis.bar(x + 0.2, theirs, 0.4, label="onnxruntime (node alone)")
        axis.set_xticks(x, [f"{layer.op}\n{layer.shape}" for layer in shown], rotation=90, fontsize=7)
        axis.set_ylabel("GFLOPS")
        axis.set_title(f"{self.model}, batch {self.batch}, {self.threads} thread(s)")
        axis.legend()
        figure.tight_layout()
        path = Path(path)
        figure.savefig(path, dpi=120)
        plt.close(figure)
        return path


def _cell(value: float | None, form: str) -> str:
    return (form.format(value) if value is not None else "-") + " |"


def tune_model(model: str | Path | Any, target: str = "host", batch: int | None = None, threads: int | None = None,
               tuner: str = "model", repeat: int = 5, compare: bool = True, jobs: int | None = None,
               cluster: str | None = None, winograd: bool = True) -> ModelTuning:
    """Tune every distinct layer of the ONNX `model` (a path or an `onnx.ModelProto`) for `target` at
    `batch` (see the module docstring), with a progress bar on a terminal. `compare`: check and time
    each layer against onnxruntime on the host, where it is installed. `jobs`: processes that tune
    layers at once (`tune_layers`; default: the cores this process may use); `cluster`: the address of
    a Dask cluster to tune them on instead. `threads` and `winograd`: as `swauto.Model`'s."""
    from tqdm import tqdm

    from swauto.frontend.integers import check_integer

    check_integer(repeat, "repeat", 1)
    threads, jobs = settings(target, tuner, batch, threads, jobs)
    graph = rewritten(load_onnx(model, batch))
    runtime = _onnxruntime() if compare and target == "host" else None
    groups: dict[Any, list[tuple[Node, Layer | None, str]]] = {}
    for node in graph.nodes:
        try:
            layer = layer_of(node, graph, winograd=winograd)
            key: Any = layer.key if layer.operator else ("view", node.name)
            groups.setdefault(key, []).append((node, layer, "ok" if layer.operator else "no kernel"))
        except Unsupported as reason:
            groups.setdefault(("unsupported", node.name), []).append((node, None, f"not compiled: {reason}"))
    tuned = tune_layers([m[0][1] for m in groups.values() if m[0][1] and m[0][1].operator], target, threads,
                        tuner, jobs, cluster)
    rng = np.random.default_rng(0)
    results = []
    for members in tqdm(list(groups.values()), desc="measuring layers", unit=" layers", disable=None, leave=False):
        node, layer, status = members[0]
        row = LayerTuning(tuple(n.name for n, _, _ in members), node.op, layer.shape if layer else "",
                          status=status)
        results.append(row)
        if layer is None or layer.operator is None:
            continue
        row.operator, row.params, row.numpy, row.flops = layer.operator, dict(layer.params), layer.numpy, layer.flops
        values = {name: _random_input(graph, name, rng) for name in node.inputs if name and name not in graph.constants}
        try:
            _tune_layer(row, layer, graph, values, target, threads, tuner, repeat, runtime)
        except SwautoError as error:
            row.status = f"not compiled: {error}"
        row.tuning_s = tuned.get(layer.key, row.tuning_s)
    name = graph.name if not isinstance(model, str | Path) else Path(model).name
    return ModelTuning(name, target, graph.batch, threads, results)


def settings(target: str, tuner: str, batch: int | None, threads: int | None,
             jobs: int | None) -> tuple[int, int]:
    """`tune_model`'s and `Model`'s arguments checked (an `ArgumentError` or `ParameterError` sentence),
    and the threads each kernel runs on (all the cores this process may use by default; 1 on a target
    that is not threaded) and the processes that tune layers (the cores by default)."""
    from swauto.api import available_threads
    from swauto.frontend.integers import check_integer

    if batch is not None:
        check_integer(batch, "batch", 1)
    plugin = targets.get(target)
    if tuner not in plugin.tuners:
        raise ArgumentError(f"the {target} target tunes with {' or '.join(plugin.tuners)}, not {tuner!r}")
    cores = available_threads()
    if threads is not None:
        check_integer(threads, "threads", 1, cores, why=f"the cores this process may run on: {cores}")
    return (threads or cores) if plugin.threaded else 1, cores if jobs is None else check_integer(jobs, "jobs", 1)


def tune_layers(layers: list[Layer], target: str, threads: int, tuner: str, jobs: int, cluster: str | None = None,
                worker: Callable[..., Tuned] | None = None
                ) -> dict[Any, float]:
    """Tune `layers` (each distinct key once) in other processes, so that this process's tuning log holds
    each one's choice when it compiles it: per key, the seconds its tuning took. They run on `jobs`
    processes of a local pool (`jobs` = 1: none), or, given a Dask `cluster` address, on its workers
    (where swauto is installed). Each worker returns the choices it recorded (a layer's prologue's and
    each of its algorithms', `Layer.sources`) and this process records them, so the workers need not
    share a file system, and a worker that dies loses no layer another has finished;
    what no worker tuned (it died, or its layer failed), this process tunes when it compiles it, and
    says why it fails then."""
    from swauto.schedule.candidate import Candidate

    distinct = list({layer.key: layer for layer in layers}.values())
    if not distinct or cluster is None and (jobs <= 1 or len(distinct) == 1):
        return {}
    targets.get(target).calibration()  # the host calibrates here once, not in every local worker
    tasks = [(tuple(library(source).read_text() for source in layer.sources), dict(layer.params), target, threads,
              tuner, dict(layer.layouts), layer.constants) for layer in distinct]
    results = (_on_cluster if cluster is not None else _on_pool)(worker or _tune_one, tasks, cluster or jobs)
    seconds: dict[Any, float] = {}
    for layer, result in zip(distinct, results, strict=True):
        if result is None:
            continue
        records, seconds[layer.key] = result
        for key, choice, details in records:  # each part and algorithm the worker tuned
            if database.lookup(key) is None:  # a local worker recorded it already
                database.record(key, Candidate.from_json(choice), details)
    return seconds


def _on_pool(worker: Callable[..., Tuned], tasks: list[tuple], jobs: int) -> list[Tuned | None]:
    """Each task's result on a local pool of spawned processes (None: it failed, or its worker died)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    results: list[Tuned | None] = []
    # 'spawn': a forked child of a process that ran kernels on the native thread pool cannot use it.
    with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=get_context("spawn")) as pool:
        for future in [pool.submit(worker, *task) for task in tasks]:
            try:
                results.append(future.result())
            except (BrokenProcessPool, SwautoError):
                results.append(None)
    return results


CONNECT_SECONDS = 20  # how long to try to reach a Dask cluster


def _on_cluster(worker: Callable[..., Tuned], tasks: list[tuple],
                address: str) -> list[Tuned | None]:
    """Each task's result on the workers of the Dask cluster at `address` (None: it failed; Dask runs a
    task again elsewhere when its worker dies, a few times)."""
    try:
        from distributed import Client
    except ImportError:
        raise ModelError("tuning on a cluster needs Dask's distributed package: pip install distributed (or "
                         "swauto's 'cluster' extra)") from None
    try:
        client = Client(address, timeout=CONNECT_SECONDS)
    except OSError as error:
        raise ModelError(f"cannot reach the Dask cluster at {address}: {error}") from None
    results: list[Tuned | None] = []
    with client:
        for future in [client.submit(worker, *task, pure=False) for task in tasks]:
            try:
                results.append(future.result())
            except Exception:  # noqa: BLE001 - a worker's error or death: this process tunes the layer itself
                results.append(None)
    return results


def _tune_one(sources: tuple[str, ...], params: dict[str, int], target: str, threads: int, tuner: str,
              layouts: dict[str, tuple[int, ...]], constants: tuple[str, ...]) -> tuple[list[database.Record], float]:
    """In a worker: tune one layer (`compile_layer` of the texts of its `sources`); the tuning log's
    records that made (`database.recorded`: its prologue's and each algorithm's choice too) and the
    seconds it took."""
    started = time.perf_counter()
    with database.recorded() as records:
        compile_layer(sources, params, target, threads, tuner, layouts, constants)
    return records, time.perf_counter() - started


def _tune_layer(row: LayerTuning, layer: Layer, graph: Graph, values: dict[str, np.ndarray], target: str,
                threads: int, tuner: str, repeat: int, runtime: Any) -> None:
    """Compile `layer` (on at most `threads` cores, as `swauto.Model` does), time it and, with `runtime`,
    the node on onnxruntime on `threads`."""
    mapping = MAPPINGS[layer.node.op]
    started = time.perf_counter()
    kernel = layer.compile(target, threads, tuner)
    row.tuning_s = time.perf_counter() - started
    row.operator = f"{kernel.operator.name}.sw"  # of its `sources`, the library file chosen (named as its operator)
    row.candidate, row.candidate_id = kernel.schedule.describe(), kernel.schedule.id
    peak = targets.get(target).peak_flops(kernel.threads)
    if target != "host":
        row.seconds = kernel.report.get("simulated_s")
        row.peak_fraction = row.flops / row.seconds / peak if row.seconds else None
        return
    local, form = in_form(layer, graph, values, {})
    runner, weights = bind(kernel, mapping.weights(layer, graph))
    ready = {**weights, **arranged(kernel, mapping.arrays(layer, graph, local, Outputs(layer.layouts)))}
    row.seconds = median_seconds(lambda: runner.run_arranged(**ready), repeat)
    row.peak_fraction = row.flops / row.seconds / peak
    if runtime is None:
        return
    # Afresh, as a model runs it: the timed calls accumulated into the output.
    arrays = run(runner, mapping.arrays(layer, graph, local, Outputs(layer.layouts)), weights)
    ours = to_form(mapping.output(layer, graph, arrays, local), form, "nchw")
    session, feeds = _node_session(runtime, layer.node, graph, values, threads)
    output_name = session.get_outputs()[0].name
    theirs = session.run([output_name], feeds)[0]
    row.onnxruntime_s = median_seconds(lambda: session.run([output_name], feeds), repeat)
    row.error = float(np.max(np.abs(ours - theirs)) / max(float(np.max(np.abs(theirs))), 1e-30))


def _random_input(graph: Graph, name: str, rng: np.random.Generator) -> np.ndarray:
    """Random values for an activation, never negative where the graph makes it so (a layer may rely on
    that, as a zero-padded max pooling after a ReLU does)."""
    values = rng.standard_normal(graph.shapes[name], dtype=np.float32)
    return np.abs(values) if non_negative(graph, name) else values


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def _node_session(runtime: Any, node: Node, graph: Graph, values: Mapping[str, np.ndarray], threads: int):
    """An onnxruntime session of `node` alone (the ONNX nodes a fused node stands for; its weights as
    initializers), and its feeds."""
    from onnx import TensorProto, helper, numpy_helper

    parts = node.parts or (node,)
    fed = list(dict.fromkeys(name for name in node.inputs if name and name not in graph.constants))
    weights = [numpy_helper.from_array(graph.constants[name], name)
               for name in dict.fromkeys(name for part in parts for name in part.inputs) if name in graph.constants]
    output = node.outputs[0]
    one = helper.make_graph(
        [helper.make_node(part.op, list(part.inputs), list(part.outputs), **dict(part.attributes))
         for part in parts], node.name,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, graph.shapes[name]) for name in fed],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, graph.shapes[output])], weights)
    proto = helper.make_model(one, opset_imports=[helper.make_opsetid("", graph.opset)])
    options = runtime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = runtime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session, {name: values[name] for name in fed}
