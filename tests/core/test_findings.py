"""The reconciliation findings log: durable, readable by every process, told once."""

from __future__ import annotations

import json
import os
from pathlib import Path

from desktop_queue.core.findings import KEEP, SLACK, FindingsLog, describe


def test_findings_are_numbered_kept_and_marked_seen(tmp_path: Path) -> None:
    log = FindingsLog(tmp_path)
    assert log.read() == [] and log.unseen() == []
    first = log.record([("a", "requeued", "outcome unknown"), ("b", "succeeded", "result found")], at=100.0)
    assert [f.seq for f in first] == [1, 2] and first[0].pid == os.getpid()
    assert [f.job_id for f in FindingsLog(tmp_path).unseen()] == ["a", "b"]  # another process reads them
    log.mark_seen(first)
    assert log.unseen() == []
    later = log.record([("c", "dead", "attempts exhausted")], at=200.0)
    assert [f.seq for f in later] == [3] and [f.job_id for f in log.unseen()] == ["c"]
    for line in log.path.read_text(encoding="utf-8").splitlines():
        assert set(json.loads(line)) == {"seq", "at", "job_id", "decision", "reason", "pid", "host"}  # no title


def test_findings_make_a_data_dir_that_does_not_exist_yet(tmp_path: Path) -> None:
    """A queue on PostgreSQL writes nothing else to its data dir, which a first run may lack."""
    log = FindingsLog(tmp_path / "new" / "data")
    log.record([("a", "requeued", "the worker's process ended")], at=1.0)
    assert [f.job_id for f in FindingsLog(tmp_path / "new" / "data").unseen()] == ["a"]


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    log = FindingsLog(tmp_path)
    log.record([("a", "requeued", "r")], at=1.0)
    with log.path.open("a", encoding="utf-8") as f:
        f.write('{"seq": 2, "at": ')  # a crash mid-append
    assert [f.job_id for f in log.read()] == ["a"]


def test_the_log_is_trimmed_to_the_newest(tmp_path: Path) -> None:
    log = FindingsLog(tmp_path)
    log.record([(f"j{i}", "requeued", "r") for i in range(KEEP + SLACK)], at=1.0)
    log.record([("last", "dead", "r")], at=2.0)
    kept = log.read()
    assert len(kept) == KEEP and kept[-1].job_id == "last" and kept[-1].seq == KEEP + SLACK + 1


def test_a_log_begun_again_is_shown_again(tmp_path: Path) -> None:
    log = FindingsLog(tmp_path)
    log.mark_seen(log.record([("a", "requeued", "r"), ("b", "requeued", "r")], at=1.0))
    log.path.unlink()  # deleted by hand
    log.record([("c", "requeued", "r")], at=2.0)
    assert [f.job_id for f in log.unseen()] == ["c"]


def test_describe_names_another_process_and_the_jobs(tmp_path: Path) -> None:
    log = FindingsLog(tmp_path)
    found = log.record([("a", "requeued", "outcome unknown; queued again")], at=1_800_000_000.0)
    mine = describe(found, {"a": "a title"}, own_pid=os.getpid(), now=1_800_000_000.0)
    assert mine == ["1 interrupted job: 1 queued again.", "• a title (job a): outcome unknown; queued again"]
    theirs = describe(found, {}, own_pid=-1, now=1_800_000_000.0)
    assert "found by another process at" in theirs[0] and theirs[1] == "• job a: outcome unknown; queued again"
