"""The host JIT's disk cache: a kernel compiled once is loaded from disk by a fresh process cache; the
key changes with the IR (shape, candidate), the knobs and ISA, the CPU and the compiler, so no stale
or foreign kernel is ever returned; a damaged or foreign entry is compiled again and rewritten, and a
cache that cannot be written is skipped, each with one warning."""

from __future__ import annotations

import numpy as np
import pytest
from test_host_backend import transposed_gemm_module

from conftest import gemm_inputs, relative_error
from swauto.backends.host import Knobs, cache, clear_cache, compile_module
from swauto.backends.host import isa as isas
from swauto.ir.nodes import fingerprint

pytestmark = pytest.mark.usefixtures("empty_cache_dir")


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


def test_a_regular_file_in_place_of_the_cache_folder_is_not_fatal(tmp_path, monkeypatch):
    from swauto.cache import CacheWarning

    module = transposed_gemm_module(32, 32, 32, tile_k=32)
    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a directory")
    arrays = _arrays(32, 32, 32)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    with pytest.warns(CacheWarning, match="cannot use its cache folder") as warned:
        compile_module(module).run(arrays)
    assert len(warned) == 1
    assert relative_error(arrays["C"], expected) <= 1e-5


def _damage(kind: str, tmp_path, key: str, other_key: str) -> None:
    """Damage the entry of `key` as a crash, a bad disk or a careless user would."""
    obj, ll = tmp_path / "host" / f"{key}.o", tmp_path / "host" / f"{key}.ll"
    data = obj.read_bytes()
    if kind == "emptied":
        obj.write_bytes(b"")
    elif kind == "truncated":
        obj.write_bytes(data[: len(data) // 2])
    elif kind == "random":
        obj.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif kind == "bit flipped":
        obj.write_bytes(data[:-100] + bytes([data[-100] ^ 4]) + data[-99:])
    elif kind == "another kernel's object":
        obj.write_bytes((tmp_path / "host" / f"{other_key}.o").read_bytes())
    elif kind == "raw object without a header":
        obj.write_bytes(data.partition(b"\n")[2])
    elif kind == "garbage IR":
        ll.write_bytes(b"\xff\xfe\x00garbage" * 100)


DAMAGES = ["emptied", "truncated", "random", "bit flipped", "another kernel's object", "raw object without a header",
           "garbage IR"]


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_damaged_entry_is_compiled_again_and_rewritten_with_one_warning(tmp_path, kind):
    from swauto.cache import CacheWarning

    module = transposed_gemm_module(32, 32, 32, tile_k=32)
    key = compile_module(module).build.key
    other_key = compile_module(transposed_gemm_module(32, 32, 64, tile_k=32)).build.key
    _damage(kind, tmp_path, key, other_key)
    clear_cache()
    with pytest.warns(CacheWarning, match="compiling it again") as warned:
        program = compile_module(module)
    assert len(warned) == 1 and not program.build.from_disk
    arrays = _arrays(32, 32, 32)
    expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
    program.run(arrays)
    assert relative_error(arrays["C"], expected) <= 1e-5
    clear_cache()
    assert compile_module(module).build.from_disk  # the entry was rewritten whole
    assert "define void" in cache.load_ir(key)


def test_a_cache_that_cannot_be_written_is_said_once(tmp_path, monkeypatch):
    import errno

    from swauto.cache import CacheWarning

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)  # where a full disk shows on most file systems
    with pytest.warns(CacheWarning, match="cannot use its cache folder") as warned:
        compile_module(transposed_gemm_module(32, 32, 32, tile_k=32))
        compile_module(transposed_gemm_module(32, 32, 64, tile_k=32))
    assert len(warned) == 1
    assert not list((tmp_path / "host").iterdir())  # no entry, and no temporary file left behind


def test_a_machine_with_other_cache_sizes_never_reuses_a_kernel(monkeypatch):
    """The same CPU name with another L2 (another guest's slice of the same model): the micro-kernel's
    prefetches depend on the L2's size (`microkernel.prefetched_rows`), so the kernel is compiled anew."""
    module = transposed_gemm_module(64, 48, 96, tile_k=32)
    first = compile_module(module)
    clear_cache()
    l1, l2, l3 = isas.cache_sizes()
    monkeypatch.setattr(isas, "cache_sizes", lambda: (l1, 2 * l2, l3))
    second = compile_module(module)
    assert not second.build.from_disk and second.build.key != first.build.key
