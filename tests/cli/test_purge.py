"""``purge`` and ``retention``: finished jobs go for good, on a date or by the saved policy."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core import Queue
from desktop_queue.core.model import State
from desktop_queue.core.outcome import Outcome

from .conftest import Cli


def finish_jobs(data_dir: Path, n: int, *, tag: str, fail_every: int = 0) -> list[str]:
    queue = Queue.open(data_dir, keep_finished=2, background_compaction=False)
    ids = []
    try:
        for i in range(n):
            job = queue.submit("demo", {"prompt": f"{tag}{i}"}).job
            lease = queue.lease("w")
            assert lease is not None
            if fail_every and i % fail_every == 0:
                queue.fail(lease, Outcome.failure("fatal", "refused"))
            else:
                queue.complete(lease, {"text": f"{tag}{i}"})
            ids.append(job.id)
        queue.store.compact_now()
    finally:
        queue.close()
    return ids


def test_purge_by_date_dry_run_then_for_real(dq: Cli, data_dir: Path) -> None:
    old = finish_jobs(data_dir, 12, tag="old", fail_every=3)
    run = dq.run("purge", "--finished-before", "0d", "--dry-run", "--json")  # everything finished until now
    assert run.code == 0, run.err
    assert run.json()["jobs"] == 12 and run.json()["dry_run"] is True
    assert len(dq.run("list", "--json").json()) == 12
    run = dq.run("purge", "--finished-before", "0d", "--state", "dead")
    assert run.code == 0 and "removed 4 jobs" in run.out
    listed = dq.run("list", "--json").json()
    assert len(listed) == 8 and all(j["state"] == State.SUCCEEDED for j in listed)
    assert dq.run("purge", "--finished-before", "0d").code == 0
    assert dq.run("list", "--json").json() == []
    assert dq.run("show", old[0]).code != 0
    assert dq.run("stats", "--json").json()["jobs"] == 0


def test_purge_refuses_a_bad_date(dq: Cli) -> None:
    run = dq.run("purge", "--finished-before", "last tuesday")
    assert run.code == 2 and "not a date, time or age" in run.err


def test_purge_takes_now_for_everything_finished_so_far(dq: Cli, data_dir: Path) -> None:
    """ "--finished-before now" was refused as "not a date, time or age"."""
    finish_jobs(data_dir, 3, tag="n")
    run = dq.run("purge", "--finished-before", "now", "--dry-run", "--json")
    assert run.code == 0, run.err
    assert run.json()["jobs"] == 3


def test_retention_is_saved_and_applied(dq: Cli, data_dir: Path) -> None:
    assert dq.run("retention").out.strip() == "everything is kept"
    finish_jobs(data_dir, 6, tag="r", fail_every=2)
    run = dq.run("retention", "--finished-days", "30", "--keep-succeeded", "--quarantine-days", "7", "--json")
    assert run.code == 0 and run.json()["finished_days"] == 30 and run.json()["keep_succeeded"] is True
    # a damaged file set aside long ago, and one set aside now
    old_copy = data_dir / "store" / "snapshot-000000000001.json.corrupt-20250101T000000"
    old_copy.write_bytes(b"x")
    long_ago = time.time() - 8 * 86_400
    os.utime(old_copy, (long_ago, long_ago))
    new_copy = data_dir / "store" / "journal-000000000001.jsonl.corrupt-20261201T000000"
    new_copy.write_bytes(b"x")
    run = dq.run("purge", "--by-retention", "--json")
    assert run.code == 0, run.err
    assert run.json()["jobs"] == 0  # nothing is 30 days old
    assert run.json()["quarantined_files"] == 1
    assert not old_copy.exists() and new_copy.exists()
    out = dq.run("retention", "--finished-days", "never").out.strip()
    assert out == "finished jobs are kept; damaged files set aside are kept 7 days"
    assert dq.run("retention", "--json").json()["finished_days"] is None


def test_a_damaged_policy_purges_nothing_and_says_so(dq: Cli, data_dir: Path) -> None:
    finish_jobs(data_dir, 3, tag="d")
    (data_dir / "retention.json").write_text("{not json")
    run = dq.run("purge", "--by-retention")
    assert run.code != 0 and "retention.json is damaged" in run.err
    assert len(dq.run("list", "--json").json()) == 3


def test_list_prints_the_newest_thousand_unless_told(dq: Cli, data_dir: Path, monkeypatch: Any) -> None:
    from desktop_queue import cli

    monkeypatch.setattr(cli, "LIST_DEFAULT_LIMIT", 5)
    finish_jobs(data_dir, 8, tag="l")
    run = dq.run("list", "--json")
    assert run.code == 0 and len(run.json()) == 5
    assert "the newest 5 of 8 jobs" in run.err
    assert len(dq.run("list", "--all", "--json").json()) == 8
    run = dq.run("list", "--limit", "7", "--json")
    assert len(run.json()) == 7 and run.err == ""
    assert dq.run("list", "--all", "--limit", "2").code == 2


def test_list_all_reads_a_page_at_a_time_and_prints_what_one_read_would(
    dq: Cli, data_dir: Path, monkeypatch: Any
) -> None:
    """``list --all`` of a million jobs held them all (6.4 GiB): it now reads and prints a
    page at a time, and the pages stitch into the same output, JSON array included."""
    from desktop_queue.core import queue as queue_module

    finish_jobs(data_dir, 11, tag="p", fail_every=4)
    whole = dq.run("list", "--all", "--json")
    whole_text = dq.run("list", "--all", "--state", "succeeded")
    reads: list[int] = []
    real_page = Queue._page

    def page(self: Queue, *args: Any, **kwargs: Any) -> Any:
        jobs, complete = real_page(self, *args, **kwargs)
        reads.append(len(jobs))
        return jobs, complete

    monkeypatch.setattr(queue_module, "LIST_PAGE", 3)
    monkeypatch.setattr(Queue, "_page", page)
    paged = dq.run("list", "--all", "--json")
    assert paged.code == 0, paged.err
    assert reads == [3, 3, 3, 2]
    assert paged.out == whole.out
    assert paged.out == orjson.dumps(paged.json(), option=orjson.OPT_INDENT_2).decode() + "\n"
    assert [j["state"] for j in paged.json()].count("dead") == 3
    assert dq.run("list", "--all", "--state", "succeeded").out == whole_text.out
    assert (
        dq.run("list", "--state", "succeeded", "--limit", "5", "--json").json()
        == [j for j in whole.json() if j["state"] == "succeeded"][:5]
    )
    assert dq.run("list", "--state", "cancelled", "--all", "--json").out == "[]\n"
    assert dq.run("list", "--state", "cancelled", "--all").out == "no jobs in state cancelled\n"


def test_one_job_is_one_job(dq: Cli, data_dir: Path) -> None:
    """ "removed 1 jobs finished before …" read as a slip; counts say their noun in the singular for one."""
    finish_jobs(data_dir, 1, tag="only")
    run = dq.run("purge", "--finished-before", "0d", "--dry-run")
    assert run.code == 0, run.err
    assert run.out.startswith("would remove 1 job finished before "), run.out
    export = dq.run("export", "--output", str(data_dir.parent / "out.jsonl"))
    assert export.code == 0, export.err
    assert "exported 1 job to " in export.err
