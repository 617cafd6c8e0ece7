"""Exchanged transfers (`swauto.passes.exchange_transfers`): a GEMM tile whose rows the mesh would cut
into short pieces moves in long blocks and is spread over the mesh by register communication."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import swauto
from conftest import EXAMPLES, relative_error
from swauto.backends.sw26010 import simulate, time_module
from swauto.ir.nodes import Dma, Module
from swauto.ir.visitor import Rewriter, walk
from swauto.machine import SUNWAY, HostScratchpad
from swauto.passes.exchange_transfers import exchange_transfers, exchanges
from swauto.reference import reference

# A ResNet downsampling layer at batch 1 (1 x 1, stride 2): each input pixel is 64 channels, 256 bytes.
DOWNSAMPLE = {"B": 1, "Ni": 64, "No": 128, "Ri": 14, "Ci": 14, "Kr": 1, "Kc": 1, "stride": 2, "pad": 0}


class _Unexchange(Rewriter):
    def rewrite_Dma(self, dma: Dma) -> Dma:
        return replace(dma, exchanged=False)


def _exchanged(module: Module) -> list[Dma]:
    return [node for node, _ in walk(module.body) if isinstance(node, Dma) and node.exchanged]


def _check_against_cut(kernel: swauto.Kernel, seed: int) -> tuple[dict, dict]:
    """The kernel's timing and that of the same program with every transfer cut over the mesh (its
    stats), after checking that the kernel computes the reference's result and that both programs give
    the same bits: an exchange changes which CPE moves a piece, not where it lands."""
    plain = replace(kernel.module, body=_Unexchange().rewrite(kernel.module.body))
    rng = np.random.default_rng(seed)
    arrays = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in kernel.operator.seed.tensors}
    expected = reference(kernel.operator, {name: array.copy() for name, array in arrays.items()})["output"]
    kernel(**arrays)
    assert relative_error(arrays["output"], expected) <= 1e-5
    laid_out = {t.name: rng.standard_normal(t.shape, dtype=np.float32) for t in plain.tensors}
    outputs = []
    for module in (kernel.module, plain):
        copies = {name: array.copy() for name, array in laid_out.items()}
        simulate(module, copies, SUNWAY)
        outputs.append(copies["output"])
    assert np.array_equal(*outputs)
    exchanged, cut = time_module(kernel.module, SUNWAY), time_module(plain, SUNWAY)
    assert exchanged.seconds < cut.seconds
    return exchanged.stats, cut.stats


def test_the_rule_follows_the_measured_table():
    """Rows of 256 bytes cut into 32-byte mesh pieces (5 GB/s in the table) are exchanged for whole
    rows (18 GB/s); rows of 8 KB (1 KB pieces against 4 KB blocks, within 10%) are not, nor are 8 rows
    of 256 bytes, which the data-parallel spread cuts into 32-byte blocks too."""
    def dense(shape: tuple[int, ...], extents: tuple[int, ...]) -> bool:
        return exchanges(shape, (extents, (), ()), (extents, (), ()), 4, SUNWAY)

    assert dense((28, 2, 64), (28, 1, 64))  # 28 pixels of 64 floats, every other one
    assert not dense((28, 2, 2048), (28, 1, 2048))
    assert not dense((8, 2, 64), (8, 1, 64))
    module = swauto.compile(EXAMPLES / "conv2d.sw", DOWNSAMPLE, target="host").module
    assert exchange_transfers(module, HostScratchpad()) is module  # no mesh on the host


def test_an_exchanged_downsampling_layer_computes_the_same_in_less_time():
    """The model's pick for the layer exchanges its transfers; on the timed simulator it runs faster
    than the same program with every transfer cut over the mesh, by at least what the transfers save
    minus the exchanges, and computes the reference's result."""
    kernel = swauto.compile(EXAMPLES / "conv2d.sw", DOWNSAMPLE, target="sw26010")
    assert _exchanged(kernel.module)
    exchanged, cut = _check_against_cut(kernel, 0)
    assert exchanged["dma_blocks"] < cut["dma_blocks"]


def test_a_first_layer_window_moves_its_bounding_box():
    """A 3-channel first layer's window (kernel rows and columns in K: 12-byte mesh pieces, its rows
    overlapping) is exchanged: the DMA engine moves its bounding box, fewer bytes in long blocks, and
    the CPEs build the window; on the timed simulator it runs faster than the same program with the
    window cut over the mesh, and both give the reference's result, bit for bit alike."""
    params = {"B": 1, "Ni": 3, "No": 32, "Ri": 64, "Ci": 64, "Kr": 3, "Kc": 3, "stride": 2, "pad": 1}
    kernel = swauto.compile(EXAMPLES / "conv2d.sw", params, target="sw26010")
    windows = [dma for dma in _exchanged(kernel.module) if dma.tensor.walks]
    assert windows
    for dma in windows:
        box = dma.moved_box()
        assert not box.walks and np.prod(box.extents) < np.prod(dma.tensor.extents)
    exchanged, cut = _check_against_cut(kernel, 1)
    assert exchanged["dma_get_bytes"] < cut["dma_get_bytes"]
