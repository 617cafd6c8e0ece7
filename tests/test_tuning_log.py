"""The tuning log keeps each tuner's choice so that the same request is not tuned twice; a damaged
record is skipped with one warning, a torn line never swallows the next record, and a log that cannot be
written (full disk, read-only or not a folder) is skipped with one warning, its records intact."""

from __future__ import annotations

import errno
import json
import os

import pytest

from swauto.cache import CacheWarning
from swauto.schedule.candidate import Candidate
from swauto.tuner import database

CANDIDATE = Candidate((("M", 128), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N", (), True)


def test_a_recorded_choice_is_found_again(tmp_path):
    key = database.request_key("operator g(...)", {"M": 512}, "sw26010", "model", 1)
    assert database.lookup(key, tmp_path) is None
    database.record(key, CANDIDATE, {"predicted_s": 1e-3}, tmp_path)
    assert database.lookup(key, tmp_path) == CANDIDATE


def test_recorded_lists_what_the_block_records_even_where_the_log_cannot_be_written(tmp_path):
    """What a tuning worker hands back (`swauto.models.tune.tune_layers`): every record made inside the
    block, in order, whether the log took it or not (a file where the folder should be)."""
    keys = [database.request_key("operator g(...)", {"M": size}, "host", "model", 1) for size in (256, 512)]
    database.record(keys[0], CANDIDATE, {}, tmp_path)  # before the block: not listed
    blocked = tmp_path / "not a folder"
    blocked.write_text("")
    with database.recorded() as records:
        database.record(keys[1], CANDIDATE, {"tuning_s": 2.0}, tmp_path)
        with pytest.warns(CacheWarning):
            database.record(keys[0], CANDIDATE, {}, blocked)
    database.record(keys[1], CANDIDATE, {}, tmp_path)  # after it: not listed
    assert records == [(keys[1], CANDIDATE.to_dict(), {"tuning_s": 2.0}), (keys[0], CANDIDATE.to_dict(), {})]
    assert Candidate.from_json(records[0][1]) == CANDIDATE


def test_any_difference_in_the_request_is_another_key():
    base = ("operator g(...)", {"M": 512}, "sw26010", "model", 1)
    keys = {
        database.request_key(*base),
        database.request_key("operator g(...) ", *base[1:]),
        database.request_key(base[0], {"M": 256}, *base[2:]),
        database.request_key(*base[:2], "host", *base[3:]),
        database.request_key(*base[:3], "measure", 1),
        database.request_key(*base[:4], 2),
    }
    assert len(keys) == 6


def test_another_compiler_is_another_key(monkeypatch):
    request = ("operator g(...)", {"M": 512}, "sw26010", "model", 1)
    before = database.request_key(*request)
    monkeypatch.setattr(database, "compiler_version", lambda: "a changed swauto")
    assert database.request_key(*request) != before


KEY = database.request_key("x", {}, "host", "model", 1)
OTHER = Candidate((("M", 256), ("N", 128), ("K", 64)), ("N_outer", "M_outer", "K_outer"), "M", (), False)


def _signed(candidate) -> bytes:
    """A record for KEY with a correct checksum of `candidate`: what Candidate.from_json itself must reject."""
    return json.dumps({"key": KEY, "candidate": candidate, "check": database._check(KEY, candidate)}).encode()


DAMAGED_RECORDS = {
    "torn": ('{"key": "' + KEY + '", "candid').encode(),
    "not UTF-8": ('{"key": "' + KEY + '", "candidate": "\xff"}').encode("latin-1"),
    "a byte not UTF-8 in a good record": json.dumps({"key": KEY, "candidate": OTHER.to_dict(), "x": "\x00"})
    .encode().replace(b"\\u0000", b"\xff"),
    "not an object": json.dumps([KEY, OTHER.to_dict()]).encode(),
    "a string": json.dumps(KEY).encode(),
    "no candidate": json.dumps({"key": KEY}).encode(),
    "a candidate of the wrong type": _signed([1, 2]),
    "a malformed candidate": _signed({**OTHER.to_dict(), "splits": {"M": "x"}}),
    "a candidate without order": _signed({"splits": {}}),
    "another candidate than its checksum's": _signed(OTHER.to_dict()).replace(b'"M_outer"', b'"K_outer"'),
    "nested too deep": b'{"key": "' + KEY.encode() + b'", "candidate": ' + b"[" * 100000 + b"}",
}


@pytest.mark.parametrize("damage", list(DAMAGED_RECORDS))
def test_a_damaged_record_is_skipped_with_one_warning(tmp_path, damage):
    database.record(KEY, CANDIDATE, {}, tmp_path)
    with open(tmp_path / database.LOG, "ab") as log:
        log.write(DAMAGED_RECORDS[damage] + b"\n" + DAMAGED_RECORDS[damage] + b"\n")
    with pytest.warns(CacheWarning, match="damaged record") as warned:
        assert database.lookup(KEY, tmp_path) == CANDIDATE  # the last usable record for the key
        assert database.lookup(KEY, tmp_path) == CANDIDATE
    assert len(warned) == 1


def test_a_request_whose_only_record_is_damaged_is_tuned_again_and_then_found(tmp_path):
    (tmp_path / database.LOG).write_bytes(DAMAGED_RECORDS["a malformed candidate"] + b"\n")
    with pytest.warns(CacheWarning):
        assert database.lookup(KEY, tmp_path) is None
    database.record(KEY, CANDIDATE, {}, tmp_path)
    assert database.lookup(KEY, tmp_path) == CANDIDATE


def test_a_torn_last_line_never_swallows_the_next_record(tmp_path):
    database.record(KEY, CANDIDATE, {}, tmp_path)
    other = database.request_key("y", {}, "host", "model", 1)
    with open(tmp_path / database.LOG, "ab") as log:
        log.write(b'{"key": "' + other.encode() + b'", "cand')  # a crash in the middle of a write
    database.record(other, OTHER, {}, tmp_path)
    with pytest.warns(CacheWarning):
        assert database.lookup(other, tmp_path) == OTHER
    assert database.lookup(KEY, tmp_path) == CANDIDATE


def test_a_full_disk_keeps_earlier_records_and_is_not_fatal(tmp_path, monkeypatch):
    database.record(KEY, CANDIDATE, {}, tmp_path)
    before = (tmp_path / database.LOG).read_bytes()
    real_write = os.write

    def full(handle: int, data: bytes) -> int:  # the disk fills in the middle of the record
        return real_write(handle, data[: len(data) // 2])

    monkeypatch.setattr(os, "write", full)
    other = database.request_key("y", {}, "host", "model", 1)
    with pytest.warns(CacheWarning, match="No space left") as warned:
        database.record(other, OTHER, {}, tmp_path)
        database.record(other, OTHER, {}, tmp_path)
    assert len(warned) == 1
    monkeypatch.setattr(os, "write", real_write)
    assert (tmp_path / database.LOG).read_bytes().startswith(before)
    assert database.lookup(KEY, tmp_path) == CANDIDATE
    database.record(other, OTHER, {}, tmp_path)  # space again
    with pytest.warns(CacheWarning, match="damaged"):
        assert database.lookup(other, tmp_path) == OTHER


@pytest.mark.parametrize("unusable", ["regular file", "read-only", "full"])
def test_a_log_that_cannot_be_used_is_skipped_with_one_warning(tmp_path, monkeypatch, unusable):
    folder = tmp_path / "cache"
    if unusable == "regular file":
        folder.write_text("not a folder")
    else:
        folder.mkdir()
        code = errno.EACCES if unusable == "read-only" else errno.ENOSPC
        real_open = os.open

        def refuse(path, flags, *args, **kwargs):
            if flags & (os.O_WRONLY | os.O_RDWR) and str(path).startswith(str(folder)):
                raise OSError(code, os.strerror(code), str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", refuse)
    with pytest.warns(CacheWarning, match="cannot use its cache folder") as warned:
        for _ in range(2):
            assert database.lookup(KEY, folder) is None
            database.record(KEY, CANDIDATE, {}, folder)
    assert len(warned) == 1


def test_compile_tunes_a_request_once(tmp_path, monkeypatch, gemm_source):
    import swauto

    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))
    params = {"M": 256, "N": 256, "K": 128}
    first = swauto.compile(gemm_source, params, target="sw26010")
    second = swauto.compile(gemm_source, params, target="sw26010")
    assert not first.report["from_tuning_log"] and second.report["from_tuning_log"]
    assert second.schedule == first.schedule
    other = swauto.compile(gemm_source, {**params, "K": 256}, target="sw26010")
    assert not other.report["from_tuning_log"]


def test_compile_goes_on_past_a_damaged_record_for_its_request(tmp_path, monkeypatch, gemm_source):
    import swauto
    from swauto.api import load

    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))
    params = {"M": 256, "N": 256, "K": 128}
    op = load(gemm_source, params)
    key = database.request_key(op.source.text, op.params, "sw26010", "model", 1, operator=op.name)
    (tmp_path / database.LOG).write_bytes(b"\xff\n[1]\n{}\n" + json.dumps({"key": key, "candidate": {"x": 1}}).encode())
    with pytest.warns(CacheWarning, match="damaged record"):
        first = swauto.compile(gemm_source, params, target="sw26010")
    second = swauto.compile(gemm_source, params, target="sw26010")
    assert not first.report["from_tuning_log"] and second.report["from_tuning_log"]


def test_a_new_host_calibration_tunes_a_request_again(tmp_path, monkeypatch, gemm_source):
    """The host model's choice depends on the measured constants: a record made under another calibration
    (another CPU, `swauto calibrate`, or one measured apart under load) is not the answer."""
    from test_host_model import _stored_fields, _write_calibration

    import swauto

    monkeypatch.setenv("SWAUTO_CACHE_DIR", str(tmp_path))
    params = {"M": 128, "N": 128, "K": 128}
    _write_calibration(tmp_path, _stored_fields(parallel_call_seconds=2e-6))
    first = swauto.compile(gemm_source, params, target="host", threads=1)
    second = swauto.compile(gemm_source, params, target="host", threads=1)
    assert not first.report["from_tuning_log"] and second.report["from_tuning_log"]
    _write_calibration(tmp_path, _stored_fields(parallel_call_seconds=4e-5))
    assert not swauto.compile(gemm_source, params, target="host", threads=1).report["from_tuning_log"]
