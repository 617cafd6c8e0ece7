"""The tuning log keeps each tuner's choice so that the same request is not tuned twice."""

from __future__ import annotations

from swauto.schedule.candidate import Candidate
from swauto.tuner import database

CANDIDATE = Candidate((("M", 128), ("N", 128), ("K", 64)), ("M_outer", "N_outer", "K_outer"), "N", (), True)


def test_a_recorded_choice_is_found_again(tmp_path):
    key = database.request_key("operator g(...)", {"M": 512}, "sw26010", "model", 1)
    assert database.lookup(key, tmp_path) is None
    database.record(key, CANDIDATE, {"predicted_s": 1e-3}, tmp_path)
    assert database.lookup(key, tmp_path) == CANDIDATE


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


def test_a_damaged_line_is_skipped(tmp_path):
    key = database.request_key("x", {}, "host", "model", 1)
    database.record(key, CANDIDATE, {}, tmp_path)
    with open(tmp_path / database.LOG, "a") as log:
        log.write('{"key": "' + key + '", "candid')
    assert database.lookup(key, tmp_path) == CANDIDATE


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
