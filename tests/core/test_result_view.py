"""What a result document holds for people (core.result_view) and run-time estimates (core.estimate)."""

from __future__ import annotations

import base64
import io
import struct
import wave
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.estimate import MIN_SAMPLES, RunTimes, Usual, progress, run_times_of
from desktop_queue.core.ledger import LedgerEntry, Usage
from desktop_queue.core.result_view import (
    ResultKind,
    audio_duration,
    cost_text,
    describe_document,
    job_details,
    no_result_reason,
    prompt_of,
    read_result,
    result_size_hint,
    show_text,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 40


def wav_bytes(seconds: float, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as fh:
        fh.setnchannels(1)
        fh.setsampwidth(2)
        fh.setframerate(rate)
        fh.writeframes(struct.pack("<h", 0) * int(rate * seconds))
    return buf.getvalue()


def finished(queue: Queue, kind: str, payload: Any, result: Any) -> Any:
    job = queue.submit(kind, payload).job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    return queue.complete(lease, result)


def test_a_chat_result_is_text_with_its_model_and_finish_reason(queue: Queue) -> None:
    job = finished(
        queue,
        "openai.chat",
        {"prompt": "hi", "model": "m1"},
        {"text": "# Hello\n\nworld", "model": "m1-2024", "finish_reason": "stop", "usage": {"prompt_tokens": 3}},
    )

    content = read_result(queue.results, job)

    assert content.kind is ResultKind.TEXT
    assert content.text == "# Hello\n\nworld"
    assert content.size == len(b"# Hello\n\nworld") and content.mime == "text/plain"
    assert content.message == "text · 14 characters · m1-2024 · finish: stop"
    assert content.meta["usage"] == {"prompt_tokens": 3}


def test_a_string_result_is_text_and_anything_else_pretty_json(queue: Queue) -> None:
    text_job = finished(queue, "demo", {"prompt": "a"}, "just words")
    json_job = finished(queue, "demo", {"prompt": "b"}, {"labels": ["x", "y"], "score": 0.5})

    assert read_result(queue.results, text_job).text == "just words"
    content = read_result(queue.results, json_job)
    assert content.kind is ResultKind.JSON and content.mime == "application/json"
    assert content.text == '{\n  "labels": [\n    "x",\n    "y"\n  ],\n  "score": 0.5\n}'


def test_an_image_artifact_is_a_file_with_its_type_and_size(queue: Queue) -> None:
    job = finished(
        queue,
        "openai.image",
        {"prompt": "a cat"},
        {"artifact_b64": base64.b64encode(PNG).decode(), "artifact_name": "x.png", "mime": "image/png", "model": "im"},
    )

    content = read_result(queue.results, job)

    assert content.kind is ResultKind.IMAGE and content.is_artifact
    assert content.path is not None and content.path.read_bytes() == PNG
    assert content.path.parent.parent == queue.results.root.resolve()
    assert content.size == len(PNG) and content.mime == "image/png"
    assert content.message == f"image · image/png · {len(PNG)} B · im"


def test_a_wav_artifact_is_audio_with_its_duration(queue: Queue) -> None:
    job = finished(
        queue,
        "openai.speech",
        {"input": "say it"},
        {"artifact_b64": base64.b64encode(wav_bytes(2.5)).decode(), "artifact_name": "s.wav", "mime": "audio/wav"},
    )

    content = read_result(queue.results, job)

    assert content.kind is ResultKind.AUDIO
    assert content.duration_s == pytest.approx(2.5)
    assert "0:02" in content.message or "0:03" in content.message


def test_audio_duration_of_pcm_and_of_formats_it_cannot_read(tmp_path: Path) -> None:
    pcm = tmp_path / "a.pcm"
    pcm.write_bytes(b"\0" * 48_000)
    mp3 = tmp_path / "a.mp3"
    mp3.write_bytes(b"ID3 not really")
    bad = tmp_path / "b.wav"
    bad.write_bytes(b"RIFF broken")

    assert audio_duration(pcm, "audio/pcm") == pytest.approx(1.0)
    assert audio_duration(mp3, "audio/mpeg") is None
    assert audio_duration(bad, "audio/wav") is None


def test_a_deleted_artifact_file_says_the_result_is_missing(queue: Queue) -> None:
    job = finished(
        queue,
        "openai.image",
        {"prompt": "gone"},
        {"artifact_b64": base64.b64encode(PNG).decode(), "artifact_name": "x.png", "mime": "image/png"},
    )
    path = read_result(queue.results, job).path
    assert path is not None
    path.unlink()

    content = read_result(queue.results, job)

    assert content.kind is ResultKind.NONE and not content.has_result
    assert content.problem is not None and "missing or damaged" in content.problem
    assert str(path) in content.message


def test_a_damaged_result_file_says_where_it_was_moved(open_queue: Any) -> None:
    queue = open_queue(background_compaction=False)
    job = finished(queue, "demo", {"prompt": "p"}, {"text": "kept in a file"})
    queue.store.compact_now()  # the journal no longer carries it: only the file has it
    path = queue.results.path_for(job.idempotency_key)
    path.write_bytes(b'{"format": "desktop-queue.result", "resu')

    content = read_result(queue.results, job)

    assert content.kind is ResultKind.NONE
    assert content.message.startswith("the result file is missing or damaged: result damaged, moved aside to ")
    assert result_size_hint(queue.results, job) is None


def test_the_size_hint_is_the_result_files_size(open_queue: Any) -> None:
    queue = open_queue(background_compaction=False)
    job = finished(queue, "demo", {"prompt": "p"}, {"text": "x" * 5000})
    queue.store.compact_now()

    hint = result_size_hint(queue.results, job)

    assert hint is not None and hint > 5000


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"state": "queued", "total_attempts": 0}, "queued — no result yet"),
        ({"state": "queued", "total_attempts": 2}, "queued to retry — no result yet"),
        ({"state": "running"}, "running — no result yet"),
        ({"state": "dead", "last_error": {"class": "fatal", "status": 401, "message": "bad key"}}, None),
        ({"state": "cancelled"}, "cancelled — no result"),
    ],
)
def test_a_job_without_a_result_says_why(fields: dict[str, Any], reason: str | None) -> None:
    said = no_result_reason(fields)
    content = describe_document(fields, None)

    assert content.kind is ResultKind.NONE and content.message == said
    if reason is None:
        assert said == "dead: fatal HTTP 401: bad key"
    else:
        assert said == reason


def test_show_text_cuts_long_text_at_a_line_end() -> None:
    short, cut = show_text("abc", 10)
    text = "\n".join(f"line {i:03d}" for i in range(100))
    long, was_cut = show_text(text, 100)

    assert (short, cut) == ("abc", False)
    assert was_cut and long.endswith("line") is False and len(long) <= 100
    assert text.startswith(long) and not long.endswith("\n")


def test_prompt_of_reads_prompt_input_text_or_the_last_user_message() -> None:
    assert prompt_of({"prompt": "p"}) == "p"
    assert prompt_of({"input": "speak"}) == "speak"
    messages = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "a"}]
    assert prompt_of({"messages": [*messages, {"role": "user", "content": "last"}]}) == "last"
    assert prompt_of([1, 2]) is None


def test_details_list_model_profile_usage_cost_ids_key_and_attempts(queue: Queue) -> None:
    job = finished(
        queue,
        "openai.chat",
        {"prompt": "what is 2+2?", "model": "gpt-4o-mini", "temperature": 0.2},
        {
            "text": "4",
            "model": "gpt-4o-mini-2024-07-18",
            "usage": {"prompt_tokens": 12, "completion_tokens": 1},
            "id": "chatcmpl-abc",
        },
    )
    doc = queue.results.get(job.idempotency_key)
    spend = [
        LedgerEntry(1.0, "openai", "gpt-4o-mini", "openai.chat", Usage(12, 1), 0.0004, job.id, 1),
        LedgerEntry(2.0, "openai", "gpt-4o-mini", "openai.chat", Usage(12, 1), 0.0004, job.id, 2),
    ]

    details = job_details(job, doc, spend=spend)
    rows = dict(details.rows)

    assert rows["Kind"] == "openai.chat"
    assert rows["Model"] == "gpt-4o-mini-2024-07-18 (asked for gpt-4o-mini)"
    assert rows["Profile"] == "openai"
    assert rows["Usage"] == "12 tokens in, 1 out"
    assert rows["Cost"].startswith("$0.0008") and "2 attempts" in rows["Cost"]
    assert rows["Provider request id"] == "chatcmpl-abc"
    assert rows["Idempotency key"].startswith(job.idempotency_key)
    assert rows["Attempts"] == f"1 of {job.max_attempts} this run (run 1), 1 in all"
    assert details.prompt == "what is 2+2?"
    assert '"temperature": 0.2' in details.input_text


def test_cost_text_without_entries_and_with_unknown_prices() -> None:
    unknown = LedgerEntry(1.0, "p", "m", "k", Usage(1, 1), None, "j", 1)
    known = LedgerEntry(1.0, "p", "m", "k", Usage(1, 1), 0.5, "j", 2)

    assert cost_text(None) == "—"
    assert cost_text([]) == "nothing recorded"
    assert cost_text([unknown]) == "unknown"
    assert cost_text([unknown, known]) == "$0.50 (2 attempts, 1 of unknown price)"


# ---------------------------------------------------------------------- estimates


def done(job_id: str, kind: str, run_s: float, model: str | None = None, state: str = "succeeded") -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": kind,
        "state": state,
        "started_at": 100.0,
        "finished_at": 100.0 + run_s,
        "input": {"model": model} if model else {},
    }


def test_the_usual_run_time_is_the_median_of_the_same_kind_and_model() -> None:
    jobs = [done(f"a{i}", "openai.chat", s, "fast") for i, s in enumerate((2.0, 3.0, 100.0))]
    jobs += [done(f"b{i}", "openai.chat", s, "slow") for i, s in enumerate((40.0, 50.0, 60.0))]
    jobs.append(done("dead", "openai.chat", 999.0, "fast", state="dead"))
    times = RunTimes.from_jobs(jobs)

    assert times.usual("openai.chat", "fast") == Usual(3.0, 3, "model")
    assert times.usual("openai.chat", "slow") == Usual(50.0, 3, "model")
    # too few of that model: the kind's median, over every model
    assert times.usual("openai.chat", "other") == Usual(45.0, 6, "kind")
    assert times.usual("demo") is None


def test_observing_a_job_twice_counts_it_once_and_updates_the_median() -> None:
    times = RunTimes()
    for i in range(MIN_SAMPLES):
        assert times.observe(done(f"j{i}", "demo", 10.0))
    before = times.usual("demo")
    assert not times.observe(done("j0", "demo", 10.0))
    times.observe(done("new", "demo", 1000.0))
    times.observe(done("new2", "demo", 1000.0))

    assert before == Usual(10.0, 3, "model")
    assert times.usual("demo") == Usual(10.0, 5, "model")
    times.observe(done("new3", "demo", 1000.0))
    assert times.usual("demo") == Usual(505.0, 6, "model")


def test_progress_against_the_usual_time() -> None:
    usual = Usual(40.0, 12, "model")

    half = progress(12.0, usual)
    over = progress(55.0, usual)
    unknown = progress(3.0, None)

    assert half.fraction == pytest.approx(0.3)
    assert half.text == "about 40 s usually (this model, 12 finished); 12 s so far"
    assert over.fraction is None and over.text.startswith("taking longer than usual: about 40 s")
    assert unknown.fraction is None and unknown.text.endswith("3.0 s so far")
    assert progress(39.9, usual).fraction is not None and progress(39.9, usual).fraction < 1


def test_run_times_of_a_queue_read_the_hot_sets_succeeded_jobs(queue: Queue, clock: FakeClock) -> None:
    for i, run_s in enumerate((4.0, 6.0, 8.0)):
        job = queue.submit("openai.chat", {"prompt": f"p{i}", "model": "m"}).job
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job.id
        clock.advance(run_s)
        queue.complete(lease, {"text": "ok"})

    times = run_times_of(queue)

    assert times.usual("openai.chat", "m") == Usual(6.0, 3, "model")


def test_a_chat_answer_keeps_its_line_breaks_in_markdown() -> None:
    from desktop_queue.core.result_view import with_line_breaks

    poem = "## A haiku\n\nQueues hum through the night,\njobs wait their turn,\ndawn finds them."
    assert (
        with_line_breaks(poem)
        == "## A haiku\n\nQueues hum through the night,\\\njobs wait their turn,\\\ndawn finds them."
    )
    # lists, code fences, tables and paragraphs stay as Markdown means them
    listed = "Steps:\n- one\n- two\n\n```\nx = 1\ny = 2\n```\n| a | b |\n|---|---|"
    assert with_line_breaks(listed) == listed
    assert with_line_breaks("one\n\ntwo") == "one\n\ntwo"
