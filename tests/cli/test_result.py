"""``desktop-queue result ID [--output FILE]`` and the text result under ``show`` (issue 11), run for real."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from desktop_queue.core import Queue
from desktop_queue.core.result_view import SHOW_TEXT_CHARS
from desktop_queue.providers import discover

from .conftest import Cli

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def finished(dq: Cli, result: Any, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """A demo job that succeeded with ``result`` (completed through the core API)."""
    job = dq.submit(payload or {"prompt": "a result", "duration_s": 0.05})
    with Queue.open(dq.data_dir, discover(), background_compaction=False) as queue:
        lease = queue.lease("test")
        assert lease is not None and lease.job_id == job["id"]
        queue.complete(lease, result)
    return job


def test_result_prints_a_text_result_on_stdout(dq: Cli) -> None:
    job = finished(dq, {"text": "Héllo,\nworld", "model": "demo-1"})

    run = dq.sub("result", job["id"])

    assert run.code == 0, run.err
    assert run.out == "Héllo,\nworld\n"
    assert run.err == ""


def test_result_writes_text_to_a_file_and_never_replaces_one_without_force(dq: Cli, tmp_path: Path) -> None:
    job = finished(dq, {"text": "into a file\n"})
    target = tmp_path / "answer.md"

    first = dq.sub("result", job["id"], "--output", str(target))
    target.write_text("mine")
    again = dq.sub("result", job["id"], "--output", str(target))
    forced = dq.sub("result", job["id"], "--output", str(target), "--force")

    assert first.code == 0 and "wrote 12 bytes" in first.err and first.out == ""
    assert again.code == 1 and "exists" in again.err
    assert forced.code == 0 and target.read_text() == "into a file\n"


def test_an_artifact_is_written_only_with_output(dq: Cli, tmp_path: Path) -> None:
    job = finished(dq, {"artifact_b64": base64.b64encode(PNG).decode(), "artifact_name": "x.png", "mime": "image/png"})
    target = tmp_path / "picture.png"

    bare = dq.sub("result", job["id"])
    written = dq.sub("result", job["id"], "--output", str(target))

    assert bare.code == 0
    stored = Path(bare.out.strip())
    assert stored.is_absolute() and stored.read_bytes() == PNG
    assert "--output FILE" in bare.err and "image/png" in bare.err
    assert written.code == 0, written.err
    assert target.read_bytes() == PNG


def test_a_json_result_prints_pretty_and_json_gives_the_document(dq: Cli) -> None:
    job = finished(dq, {"labels": ["a", "b"]})

    text = dq.sub("result", job["id"])
    doc = dq.sub("result", job["id"], "--json")

    assert text.code == 0 and json.loads(text.out) == {"labels": ["a", "b"]}
    assert '\n  "labels"' in text.out
    assert doc.code == 0 and doc.json()["result"] == {"labels": ["a", "b"]}
    assert doc.json()["key"] == job["idempotency_key"]


def test_result_exit_codes_no_such_job_and_no_result_yet(dq: Cli) -> None:
    queued = dq.submit({"prompt": "still waiting"})

    missing = dq.sub("result", "no-such-job")
    waiting = dq.sub("result", queued["id"])

    assert missing.code == 3 and missing.out == ""
    assert waiting.code == 4 and "queued — no result yet" in waiting.err and waiting.out == ""


def test_result_of_a_dead_job_says_why(dq: Cli) -> None:
    job = dq.submit({"prompt": "bad", "duration_s": 0.01, "fail_times": 9, "fail_with": "fatal"}, "--max-attempts", "1")
    worked = dq.sub("work", "--until-idle", "--max-seconds", "30")
    assert worked.code in (0, 1), worked.err

    run = dq.sub("result", job["id"])

    assert run.code == 4
    assert "has no result: dead: fatal" in run.err


def test_result_of_a_deleted_result_file_fails_with_the_reason(dq: Cli) -> None:
    job = dq.submit({"prompt": "a", "duration_s": 0.05})
    with Queue.open(dq.data_dir, discover(), background_compaction=False) as queue:
        lease = queue.lease("test")
        assert lease is not None
        done = queue.complete(lease, {"text": "soon gone"})
        queue.store.compact_now()
    (dq.data_dir / str(done.result_ref)).unlink()

    run = dq.sub("result", job["id"])

    assert run.code == 1
    assert "the result file is missing or damaged" in run.err and run.out == ""


def test_show_prints_the_text_result_under_the_timeline(dq: Cli) -> None:
    job = finished(dq, {"text": "line one\nline two", "model": "demo-1"})

    run = dq.sub("show", job["id"])
    data = dq.sub("show", job["id"], "--json")

    assert run.code == 0, run.err
    timeline, _, tail = run.out.partition("\nresult (")
    assert "timeline" in timeline and "succeeded" in timeline
    assert tail.startswith("text · 17 characters · demo-1)")
    assert "\n  line one\n  line two\n" in tail
    assert data.json()["result"]["text"] == "line one\nline two"


def test_show_cuts_a_long_text_result_with_a_note(dq: Cli) -> None:
    text = "\n".join(f"paragraph {i}: " + "words " * 10 for i in range(400))
    job = finished(dq, {"text": text})

    run = dq.sub("show", job["id"])

    assert run.code == 0
    assert len(run.out) < SHOW_TEXT_CHARS + 3000
    assert f"more characters: desktop-queue result {job['id']} prints all of it" in run.out
    assert dq.sub("result", job["id"]).out == text + "\n"


def test_show_of_an_artifact_names_its_file_and_prints_no_text(dq: Cli) -> None:
    job = finished(dq, {"artifact_b64": base64.b64encode(PNG).decode(), "artifact_name": "x.png", "mime": "image/png"})

    run = dq.sub("show", job["id"])

    assert run.code == 0
    assert "artifact  " in run.out and "\nresult (" not in run.out
