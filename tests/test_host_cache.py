"""The host JIT's disk cache: a kernel compiled once is loaded from disk by a fresh process cache; the
key changes with the IR (shape, candidate), the knobs and ISA, the CPU and the compiler, so no stale
or foreign kernel is ever returned."""

from __future__ import annotations

import numpy as np
import pytest
from test_host_backend import transposed_gemm_module

from conftest import gemm_inputs, relative_error
from swauto.backends.host import Knobs, cache, clear_cache, compile_module
from swauto.backends.host import isa as isas
from swauto.ir.nodes import fingerprint


@pytest.fixture(autouse=True)
def _empty_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))
    clear_cache()
    yield
    clear_cache()


def _arrays(m: int, n: int, k: int) -> dict[str, np.ndarray]:
    arrays = gemm_inputs(m, n, k, seed=2)
    arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
    return arrays


def test_a_kernel_is_stored_once_and_loaded_from_disk_afterwards(tmp_path):
    module = transposed_gemm_module(64, 48, 96, tile_k=32)
    first = compile_module(module)
    assert not first.build.from_disk
    assert len(list((tmp_path / "host").glob("*.o"))) == 1
    clear_cache()  # as in a new process
    second = compile_module(module)
    assert second.build.from_disk and second.build.key == first.build.key
    assert "define void" in second.llvm_ir
    arrays = _arrays(64, 48, 96)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    second.run(arrays)
    assert relative_error(arrays["C"], expected) <= 1e-5


def test_other_shapes_candidates_knobs_and_isas_get_other_keys(tmp_path):
    keys = {
        compile_module(transposed_gemm_module(64, 48, 96, tile_k=32)).build.key,
        compile_module(transposed_gemm_module(64, 48, 128, tile_k=32)).build.key,  # another shape
        compile_module(transposed_gemm_module(64, 48, 96, tile_k=16)).build.key,  # another candidate
        compile_module(transposed_gemm_module(64, 48, 96, tile_k=32), knobs=Knobs(4, 1)).build.key,
        compile_module(transposed_gemm_module(64, 48, 96, tile_k=32), isa="generic").build.key,
    }
    assert len(keys) == 5
    assert len(list((tmp_path / "host").glob("*.o"))) == 5


def test_another_cpu_or_compiler_never_reuses_a_kernel(monkeypatch):
    module = transposed_gemm_module(64, 48, 96, tile_k=32)
    base = cache.kernel_key(fingerprint(module), "k", "avx512", "znver4", "+avx512f")
    assert cache.kernel_key(fingerprint(module), "k", "avx512", "znver5", "+avx512f") != base
    assert cache.kernel_key(fingerprint(module), "k", "avx512", "znver4", "+avx512f,+avx512bf16") != base
    monkeypatch.setattr(cache, "CODEGEN_VERSION", "another backend")
    assert cache.kernel_key(fingerprint(module), "k", "avx512", "znver4", "+avx512f") != base
    compile_module(module)
    clear_cache()
    _, features = isas.host_cpu()
    monkeypatch.setattr(isas, "host_cpu", lambda: ("another-cpu", features))
    assert not compile_module(module).build.from_disk


def test_a_corrupt_or_unwritable_cache_is_not_fatal(tmp_path, monkeypatch):
    module = transposed_gemm_module(32, 32, 32, tile_k=32)
    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a directory")
    arrays = _arrays(32, 32, 32)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    compile_module(module).run(arrays)
    assert relative_error(arrays["C"], expected) <= 1e-5


