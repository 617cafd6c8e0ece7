"""Fault injection into swauto's caches: random damage to cached kernels, tuning logs and calibration
files, concurrent processes appending to one log while some are SIGKILLed, and cache folders that cannot
be used. Nothing may crash or raise, nothing acknowledged may be lost, and every answer must be right.

Bounded by default (a few seconds); `SWAUTO_FUZZ=N` runs N inputs per test instead (e.g. 200).
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import random
import signal
import time
import warnings
from dataclasses import asdict

import numpy as np
import pytest
from test_host_backend import transposed_gemm_module
from test_host_model import quiet_machine

import swauto.cache
from conftest import GEMM_SW, gemm_inputs, gemm_reference, relative_error
from swauto.backends.host import clear_cache, compile_module
from swauto.cache import CacheWarning
from swauto.schedule.candidate import Candidate
from swauto.tuner import database, host_model

FUZZ = int(os.environ.get("SWAUTO_FUZZ") or 0)


def _inputs(default: int) -> int:
    return FUZZ or default


pytestmark = pytest.mark.usefixtures("empty_cache_dir")


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """`data` damaged one random way: emptied, truncated, bits flipped, bytes replaced, inserted or
    deleted, random bytes appended, or replaced by random bytes."""
    kind = rng.randrange(7)
    if not data or kind == 0:
        return b"" if data else bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    position = rng.randrange(len(data))
    if kind == 1:
        return data[:position]
    if kind == 2:
        damaged = bytearray(data)
        for _ in range(rng.randrange(1, 9)):
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        return bytes(damaged)
    if kind == 3:
        return data[:position] + bytes([rng.randrange(256)]) + data[position + 1:]
    if kind == 4:
        return data[:position] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))) + data[position:]
    if kind == 5:
        return data[:position] + data[position + rng.randrange(1, 16):]
    return rng.randbytes(rng.randrange(1, 2 * len(data)))


def test_damaged_kernel_cache_entries_are_compiled_again(tmp_path):
    rng = random.Random(14)
    modules = [transposed_gemm_module(32, 32, 32, tile_k=32), transposed_gemm_module(32, 32, 64, tile_k=32)]
    keys = [compile_module(module).build.key for module in modules]
    files = sorted((tmp_path / "host").iterdir())
    for _ in range(_inputs(8)):
        which = rng.randrange(len(modules))
        target = rng.choice([path for path in files if path.stem == keys[which]])
        before = target.read_bytes()
        if rng.random() < 0.2:  # another kernel's file of the same kind under this key
            damaged = (tmp_path / "host" / f"{keys[1 - which]}{target.suffix}").read_bytes()
        else:
            damaged = _mutate(before, rng)
        if damaged == before:
            continue
        target.write_bytes(damaged)
        clear_cache()  # as in a new process, which warns again
        swauto.cache._WARNED.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            program = compile_module(modules[which])
        assert not program.build.from_disk and len(caught) == 1 and caught[0].category is CacheWarning
        k = 32 * (which + 1)
        arrays = gemm_inputs(32, 32, k, seed=rng.randrange(100))
        arrays["AT"] = np.ascontiguousarray(arrays.pop("A").T)
        expected = arrays["C"].astype(np.float64) + arrays["AT"].T.astype(np.float64) @ arrays["B"]
        program.run(arrays)
        assert relative_error(arrays["C"], expected) <= 1e-5
        assert target.read_bytes() == before  # rewritten: the same key, the same code


def _candidate(index: int) -> Candidate:
    return Candidate((("M", 32 * (index + 1)), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N", (),
                     index % 2 == 0)


def _random_json(rng: random.Random, depth: int = 0):
    """A random JSON value, sometimes shaped like a record."""
    choice = rng.randrange(8 if depth < 3 else 4)
    if choice == 0:
        return rng.choice([None, True, False])
    if choice == 1:
        return rng.choice([0, -1, 2 ** 70, 1.5, float("inf")])
    if choice == 2:
        return rng.choice(["", "x", "\u2028", "\x00"])
    if choice == 3:
        return rng.choice([[], {}])
    if choice == 4:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    fields = ["key", "candidate", "check", "splits", "order", "vectorize", "layouts", "double_buffer", "micro_kernel"]
    return {rng.choice(fields): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_damaged_tuning_logs_never_raise_nor_answer_wrong(tmp_path):
    rng = random.Random(14)
    keys = [database.request_key(f"op {index}", {}, "host", "model", 1) for index in range(12)]
    for trial in range(_inputs(20)):
        folder = tmp_path / str(trial)
        for index, key in enumerate(keys):
            database.record(key, _candidate(index), {"tuning_s": 1.0}, folder)
        log = folder / database.LOG
        data = log.read_bytes()
        for _ in range(rng.randrange(1, 6)):
            if rng.random() < 0.4:  # a foreign line, shaped like a record for one of the keys or not
                value = _random_json(rng)
                if isinstance(value, dict) and rng.random() < 0.7:
                    value["key"] = rng.choice(keys)
                line = json.dumps(value).encode()
                position = rng.choice([0, len(data)] + [i + 1 for i, b in enumerate(data) if b == 10][:5])
                data = data[:position] + b"\n" + line + b"\n" + data[position:]
            else:
                data = _mutate(data, rng)
        log.write_bytes(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for index, key in enumerate(keys):
                found = database.lookup(key, folder)
                assert found in (None, _candidate(index)), (trial, index, found)
            # appending after any damage (a torn last line among it) is found again
            database.record(keys[0], _candidate(0), {}, folder)
            assert database.lookup(keys[0], folder) == _candidate(0)
        assert len(caught) <= 1 and all(warning.category is CacheWarning for warning in caught)


def _append_forever(folder, writer: int, acknowledged) -> None:
    for index in range(10 ** 9):
        key = database.request_key(f"writer {writer}", {"i": index}, "host", "model", 1)
        database.record(key, _candidate(index % 7), {"writer": writer}, folder)
        acknowledged.put((key, index % 7))  # only once the record is written: it must survive


def test_concurrent_writers_killed_at_random_never_lose_an_acknowledged_record(tmp_path):
    rng = random.Random(14)
    context = multiprocessing.get_context("fork")
    acknowledged = context.Queue()
    writers, kills = (16, 40) if FUZZ else (6, 8)
    kills = max(kills, FUZZ // 4)
    running = {}
    for serial in range(writers + kills):
        if serial >= writers:  # one writer dies at a random moment; a new one replaces it
            time.sleep(rng.uniform(0.0, 0.03))
            os.kill(running.pop(rng.choice(list(running))).pid, signal.SIGKILL)
        running[serial] = context.Process(target=_append_forever, args=(tmp_path, serial, acknowledged))
        running[serial].start()
    time.sleep(0.05)
    for process in running.values():
        os.kill(process.pid, signal.SIGKILL)
    for process in context.active_children():
        process.join()
    records = []
    while True:
        try:
            records.append(acknowledged.get(timeout=0.5))
        except Exception:  # queue.Empty
            break
    assert records, "no writer got to write"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lost = [key for key, index in records if database.lookup(key, tmp_path) != _candidate(index)]
    assert not lost and len(caught) <= 1


def test_damaged_calibration_files_are_measured_again(tmp_path, monkeypatch):
    rng = random.Random(14)
    cpu = host_model._cpu()
    monkeypatch.setattr(host_model, "calibrate", lambda cpu: quiet_machine(cpu))
    good = json.dumps({"version": host_model.CALIBRATION_VERSION, "machine": asdict(quiet_machine(cpu))}).encode()
    path = tmp_path / host_model.CALIBRATION_FILE
    fields = list(asdict(quiet_machine(cpu)))
    for _ in range(_inputs(30)):
        if rng.random() < 0.5:
            data = _mutate(good, rng)
        else:  # valid JSON, one field given a random value
            stored = json.loads(good)
            stored["machine"][rng.choice(fields)] = _random_json(rng)
            data = json.dumps(stored).encode()
        path.write_bytes(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = host_model.machine(tmp_path)
        assert host_model.disturbed(loaded) is None and np.isfinite(loaded.kernel_flops) and loaded.kernel_flops > 0
        assert len(caught) <= 1
        assert host_model.machine(tmp_path) == loaded  # what is stored now is usable


def _refuse_writes_under(folder, code: int, monkeypatch) -> None:
    """Make every write under `folder` fail with `code`, as a read-only folder or a full disk does."""
    real_open, real_mkdir = os.open, os.mkdir

    def fail(path) -> None:
        raise OSError(code, os.strerror(code), str(path))

    def refusing_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and str(path).startswith(str(folder)):
            fail(path)
        return real_open(path, flags, *args, **kwargs)

    def refusing_mkdir(path, *args, **kwargs):
        if str(path).startswith(str(folder)):
            fail(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    monkeypatch.setattr(os, "mkdir", refusing_mkdir)


@pytest.mark.parametrize("target", ["host", "sw26010"])
@pytest.mark.parametrize("unusable", ["regular file", "read-only", "full disk"])
def test_compiling_works_without_a_usable_cache_folder_with_one_warning(tmp_path, monkeypatch, unusable, target):
    folder = tmp_path / "cache"
    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(folder))
    monkeypatch.setattr(host_model, "calibrate", lambda cpu: quiet_machine(cpu))
    if unusable == "regular file":
        folder.write_text("not a folder")
    else:
        _refuse_writes_under(folder, errno.EACCES if unusable == "read-only" else errno.ENOSPC, monkeypatch)
    params = {"M": 128, "N": 128, "K": 64}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            clear_cache()
            kernel = swauto.compile(GEMM_SW, params, target=target)
            arrays = gemm_inputs(128, 128, 64)
            expected = gemm_reference(arrays)
            kernel(**arrays)
            assert relative_error(arrays["C"], expected) <= 1e-5
    assert [warning.category for warning in caught] == [CacheWarning], [str(w.message) for w in caught]
    assert "cannot use its cache folder" in str(caught[0].message)


def test_a_damaged_cached_parser_is_built_again_with_one_warning():
    """The built parser is kept in the cache folder; any damage to that file means building it again
    (said once), and the file written then is good."""
    from swauto.frontend import parser

    parser._parser.cache_clear()
    parser.parse(GEMM_SW)  # builds and stores it
    (path,) = (swauto.cache.cache_dir() / "parser").iterdir()
    good = path.read_bytes()
    rng = random.Random(21)
    for _ in range(_inputs(6)):
        path.write_bytes(_mutate(good, rng))
        parser._parser.cache_clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert parser.parse(GEMM_SW).name == "gemm"
        assert len([w for w in caught if issubclass(w.category, CacheWarning)]) <= 1
        parser._parser.cache_clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # stored again, whole: no warning now
            assert parser.parse(GEMM_SW).name == "gemm"
    parser._parser.cache_clear()
