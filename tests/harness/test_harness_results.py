"""Results files cannot tear or lie: appends are whole or absent, a torn line never swallows the next
record, and "done" has one answer."""
import errno
import json
import logging
import os

import pytest

import zoo.results
from zoo.results import FINAL, append_jsonl, check_writable, final_records, read_jsonl, run_states
from zoo.errors import ConfigError


def test_short_writes_are_completed(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(zoo.results.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    for i in range(3):
        append_jsonl(tmp_path / "r.jsonl", {"id": str(i), "status": "completed", "pad": "x" * 50})
    assert [r["id"] for r in read_jsonl(tmp_path / "r.jsonl")] == ["0", "1", "2"]


def test_a_failed_write_leaves_no_partial_line(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    append_jsonl(path, {"id": "a", "status": "completed"})
    before = path.read_bytes()
    real_write = os.write

    def disk_fills(fd, data):
        real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zoo.results.os, "write", disk_fills)
    with pytest.raises(OSError, match="No space left"):
        append_jsonl(path, {"id": "b", "status": "completed"})
    assert path.read_bytes() == before


def test_torn_last_line_does_not_swallow_the_next_record(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "status": "completed"}) + "\n" + '{"id": "b", "sta')
    with caplog.at_level(logging.WARNING, logger="zoo"):
        append_jsonl(path, {"id": "c", "status": "completed"})
    assert "torn" in caplog.text
    assert [r["id"] for r in read_jsonl(path)] == ["a", "c"]


def test_timeout_is_final_and_failed_is_not(tmp_path):
    records = [{"id": "t", "status": "timeout"}, {"id": "f", "status": "failed"}, {"id": "d", "status": "diverged"}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "timeout" in FINAL
    assert set(final_records(tmp_path)) == {"t", "d"}
    assert run_states(tmp_path) == {"t": "timeout", "f": "failed", "d": "diverged"}


def test_unlogged_result_json_counts_as_done(tmp_path):
    (tmp_path / "runs" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "result.json").write_text(json.dumps({"id": "x", "status": "completed"}))
    assert set(final_records(tmp_path)) == {"x"}
    assert not (tmp_path / "results.jsonl").exists()  # reading never writes


def test_unwritable_folder_is_named(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError) as info:
        check_writable(tmp_path / "f" / "out")
    assert info.value.key == "out" and "write" in str(info.value)
