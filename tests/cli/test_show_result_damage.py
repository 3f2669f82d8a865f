"""``show`` of a succeeded job whose result file was deleted or damaged (issue 10).

The job is shown (exit 0), but the result line, ``result_problem`` in ``--json`` and a
line on stderr say what is wrong, naming the file a damaged result was moved aside to,
instead of printing a path that is not there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from desktop_queue.core import Queue
from desktop_queue.providers import discover

from .conftest import Cli

FAST = {"prompt": "a haiku about damaged files", "duration_s": 0.05}


def succeeded_with_a_result_file(dq: Cli) -> tuple[dict[str, Any], Path]:
    """A succeeded job whose result lives only in its file (compaction folded the journal record)."""
    job = dq.submit(FAST)
    with Queue.open(dq.data_dir, discover(), background_compaction=False) as queue:
        lease = queue.lease("test")
        assert lease is not None
        done = queue.complete(lease, {"text": "kept in a file"})
        queue.store.compact_now()
    path = dq.data_dir / str(done.result_ref)
    assert json.loads(path.read_text())["result"] == {"text": "kept in a file"}
    return job, path


def test_show_says_a_deleted_result_file_is_missing(dq: Cli) -> None:
    job, path = succeeded_with_a_result_file(dq)
    path.unlink()

    text = dq.run("show", job["id"])
    data = dq.run("show", job["id"], "--json")

    assert text.code == 0 and data.code == 0
    assert "result    result file missing" in text.out
    assert f"job {job['id']}: result file missing" in text.err
    problem = data.json()["result_problem"]
    assert problem["kind"] == "missing" and problem["moved_to"] is None
    assert "result file missing" in problem["message"]
    assert data.json()["result"] is None


def test_show_names_where_a_damaged_result_file_was_moved(dq: Cli) -> None:
    job, path = succeeded_with_a_result_file(dq)
    path.write_bytes(b'{"format": "desktop-queue.result", "resu')

    text = dq.run("show", job["id"])
    (moved,) = path.parent.glob(path.name + ".corrupt-*")
    data = dq.run("show", job["id"], "--json")  # a later show still knows where it went

    assert text.code == 0 and data.code == 0
    assert not path.exists()
    assert f"result    result damaged, moved aside to {moved}" in text.out
    assert str(moved) in text.err
    problem = data.json()["result_problem"]
    assert problem == {
        "kind": "damaged",
        "message": f"result damaged, moved aside to {moved}",
        "ref": data.json()["result_ref"],
        "moved_to": str(moved),
    }


def test_show_of_a_healthy_result_reports_no_problem(dq: Cli) -> None:
    job, path = succeeded_with_a_result_file(dq)

    text = dq.run("show", job["id"])
    data = dq.run("show", job["id"], "--json")

    assert text.err == "" and f"result    {data.json()['result_ref']}" in text.out
    assert data.json()["result_problem"] is None
    assert data.json()["result"] == {"text": "kept in a file"}


def test_a_result_the_journal_still_carries_is_not_missing(dq: Cli) -> None:
    job = dq.submit(FAST)
    with Queue.open(dq.data_dir, discover()) as queue:
        lease = queue.lease("test")
        assert lease is not None
        done = queue.complete(lease, {"text": "from the journal"})
    assert not (dq.data_dir / str(done.result_ref)).exists()

    data = dq.run("show", job["id"], "--json")

    assert data.code == 0 and data.err == ""
    assert data.json()["result_problem"] is None
