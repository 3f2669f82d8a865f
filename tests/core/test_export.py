"""Export to CSV / JSON Lines and import back: nothing is lost (a Hypothesis property)."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from desktop_queue.core import FakeClock, InvalidInput, Outcome, Queue
from desktop_queue.core.export import read_export, write_export
from desktop_queue.core.search import SearchQuery

#: prompts a spreadsheet finds hard: commas, quotes, newlines, non-Latin text
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(',"\n\r\t;'),
    min_size=1,
    max_size=40,
).filter(lambda s: s.strip())

#: what happens to a job: (how it ends, prompt)
FATES = st.lists(
    st.tuples(st.sampled_from(["queued", "succeeded", "dead", "resolved", "cancelled", "replayed"]), TEXT),
    min_size=1,
    max_size=8,
)


def build(queue: Queue, clock: FakeClock, fates: list[tuple[str, str]]) -> None:
    # the jobs left queued come last: a lease takes the oldest queued job
    ordered = sorted(enumerate(fates), key=lambda item: item[1][0] == "queued")
    for number, (fate, prompt) in ordered:
        job = queue.submit("demo", {"prompt": prompt, "n": number}, title=prompt[:20]).job
        clock.advance(1.5)
        if fate == "queued":
            continue
        if fate == "cancelled":
            queue.cancel(job.id)
            continue
        lease = queue.lease("w", accept=lambda j, wanted=job.id: j["id"] == wanted)
        assert lease is not None and lease.job_id == job.id
        clock.advance(0.25)
        if fate == "succeeded":
            queue.complete(lease, {"text": f"answer {number}"})
            continue
        queue.fail(lease, Outcome.failure("fatal", f"demo: refused, {prompt[:10]}", status=400))
        if fate == "resolved":
            queue.resolve(job.id, note=f"note {prompt[:10]}")
        elif fate == "replayed":
            queue.replay(job.id)


def exported(queue: Queue, fmt: str, query: SearchQuery | None = None) -> bytes:
    out = io.BytesIO()
    write_export(queue.find_jobs(query), out, fmt, with_input=True)
    return out.getvalue()


def comparable(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Documents by id, without what an import renumbers (``seq``)."""
    return {d["id"]: {k: v for k, v in d.items() if k != "seq"} for d in docs}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fates=FATES, fmt=st.sampled_from(["csv", "jsonl"]))
def test_export_then_import_loses_nothing(fates: list[tuple[str, str]], fmt: str) -> None:
    from desktop_queue.providers.demo import DemoProvider

    providers = {"demo": DemoProvider()}
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock()
        source = Queue.open(Path(tmp) / "a", providers, clock=clock, background_compaction=False)
        target = Queue.open(Path(tmp) / "b", providers, clock=clock, background_compaction=False)
        try:
            build(source, clock, fates)
            data = exported(source, fmt)
            docs = list(read_export(data))
            assert len(docs) == len(source.list())
            result = target.import_jobs(docs)
            assert not result.skipped
            again = list(read_export(exported(target, fmt)))
            assert comparable(again) == comparable(docs)
            # the imported store agrees on everything a person looks at
            assert target.counts() == source.counts()
            for job in source.list(with_events=True):
                copy = target.get(job.id)
                assert copy.to_json() | {"seq": 0} == job.to_json() | {"seq": 0}
            # importing again adds nothing
            assert target.import_jobs(docs).added == []
        finally:
            source.close()
            target.close()


def test_inputs_are_left_out_unless_asked(open_queue: Any, clock: FakeClock) -> None:
    from desktop_queue.providers.demo import DemoProvider

    queue = open_queue(providers={"demo": DemoProvider()})
    # (the test's titles and errors quote the prompt's start: look for its end)
    build(queue, clock, [("dead", "SECRET-PROMPT-TEXT longer than a title"), ("succeeded", "another")])
    for fmt in ("csv", "jsonl"):
        out = io.BytesIO()
        assert write_export(queue.find_jobs(), out, fmt) == 2
        assert b"longer than a title" not in out.getvalue()
        assert b"dead" in out.getvalue() and b"submitted" in out.getvalue()  # states and events are there
    docs = list(read_export(exported(queue, "jsonl", SearchQuery.parse("state:dead"))))
    assert [d["state"] for d in docs] == ["dead"]
    assert docs[0]["input"]["prompt"] == "SECRET-PROMPT-TEXT longer than a title"


def test_import_refuses_what_it_cannot_rebuild(open_queue: Any) -> None:
    queue = open_queue()
    with pytest.raises(InvalidInput, match="job 1"):
        queue.import_jobs([{"id": "x"}])
    with pytest.raises(InvalidInput, match="needs its input"):
        queue.import_jobs([{"id": "abc", "kind": "demo", "state": "queued", "idempotency_key": "k", "created_at": 1.0}])
    with pytest.raises(InvalidInput, match="line 2"):
        list(read_export(b'{"id": "a"}\n{not json\n'))
    assert queue.list() == []


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_results_go_along_when_asked_and_a_duplicate_finds_them(tmp_path: Path, fmt: str) -> None:
    """An imported succeeded job said "result file missing: … is not there any more", and a
    duplicate of its input returned that job without an answer: the result stayed behind."""
    import base64

    from desktop_queue.core.export import exported_result
    from desktop_queue.providers.demo import DemoProvider

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    providers = {"demo": DemoProvider()}
    with Queue.open(tmp_path / "a", providers) as source, Queue.open(tmp_path / "b", providers) as target:
        text_job = source.submit("demo", {"prompt": "a poem"}, title="poem").job
        lease = source.lease("w")
        assert lease is not None
        source.complete(lease, {"text": "roses, queues"})
        image_job = source.submit("demo", {"prompt": "an image"}, title="image").job
        lease = source.lease("w")
        assert lease is not None
        image = {"artifact_b64": base64.b64encode(png).decode(), "mime": "image/png", "artifact_name": "x.png"}
        source.complete(lease, image)
        out = io.BytesIO()
        results = source.results
        write_export(source.find_jobs(), out, fmt, with_input=True, result_of=lambda j: exported_result(results, j))
        imported = target.import_jobs(list(read_export(out.getvalue())))
        assert sorted(imported.added) == sorted([text_job.id, image_job.id])
        assert imported.results == 2 and imported.without_result == []

        copy = target.get(text_job.id)
        assert copy.result_ref is not None and target.results.problem(copy.idempotency_key) is None
        assert target.results.get(copy.idempotency_key)["result"] == {"text": "roses, queues"}
        again = target.submit("demo", {"prompt": "a poem"})
        assert again.duplicate and again.job.id == text_job.id  # the answer is here: nothing paid again
        art = target.results.get(target.get(image_job.id).idempotency_key)["result"]
        assert target.results.read_artifact(art["artifact_ref"]) == png and art["mime"] == "image/png"


def test_an_import_without_results_names_the_succeeded_jobs_left_without(tmp_path: Path) -> None:
    from desktop_queue.providers.demo import DemoProvider

    providers = {"demo": DemoProvider()}
    with Queue.open(tmp_path / "a", providers) as source, Queue.open(tmp_path / "b", providers) as target:
        job = source.submit("demo", {"prompt": "a poem"}).job
        lease = source.lease("w")
        assert lease is not None
        source.complete(lease, {"text": "roses"})
        out = io.BytesIO()
        write_export(source.find_jobs(), out, "jsonl")
        imported = target.import_jobs(list(read_export(out.getvalue())))
        assert imported.results == 0 and imported.without_result == [job.id]


def test_a_result_the_disk_refuses_imports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from desktop_queue.core.errors import StoreError
    from desktop_queue.core.export import exported_result
    from desktop_queue.providers.demo import DemoProvider

    providers = {"demo": DemoProvider()}
    with Queue.open(tmp_path / "a", providers) as source, Queue.open(tmp_path / "b", providers) as target:
        source.submit("demo", {"prompt": "a poem"})
        lease = source.lease("w")
        assert lease is not None
        source.complete(lease, {"text": "roses"})
        out = io.BytesIO()
        results = source.results
        write_export(source.find_jobs(), out, "jsonl", result_of=lambda j: exported_result(results, j))

        def full(*_a: Any, **_k: Any) -> Any:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(target.results, "put_new", full)  # (the write of an imported result)
        with pytest.raises(StoreError, match="No space left on device; nothing was imported"):
            target.import_jobs(list(read_export(out.getvalue())))
        assert target.list() == []


def test_jobs_come_newest_first_across_the_hot_set_and_the_archive(open_queue: Any, clock: FakeClock) -> None:
    """A job queued long ago is hot while newer finished ones are archived: export listed the
    hot set first, so it came before them (and an import takes the order given)."""
    queue = open_queue(keep_finished=2, keep_finished_s=0.0, background_compaction=False)
    waiting = queue.submit("demo", {"prompt": "later"}, run_after=clock.now() + 86400).job.id
    for i in range(8):
        queue.submit("demo", {"prompt": f"now {i}"})
        lease = queue.lease("w")
        assert lease is not None
        clock.advance(1.0)
        queue.complete(lease, {"text": f"answer {i}"})
    queue.store.compact_now()
    assert not queue.hot_among([j.id for j in queue.list("succeeded")][3:])  # (the older ones are archived)
    found = [j.id for j in queue.find_jobs(page=3)]
    assert found == [j.id for j in queue.list()]
    assert found[-1] == waiting
    assert [j.id for j in queue.find_jobs(SearchQuery(state="succeeded"), page=3)] == [
        j.id for j in queue.list("succeeded")
    ]


def test_an_import_keeps_the_order_jobs_were_submitted_in(tmp_path: Path, clock: FakeClock) -> None:
    """An export lists the newest first, and an import took that order as the submission
    order: every list came back reversed, and the queued jobs were leased newest first."""
    source = Queue.open(tmp_path / "a", clock=clock)
    for i in range(3):
        done = source.submit("demo", {"prompt": f"done {i}"}).job
        lease = source.lease("w")
        assert lease is not None and lease.job_id == done.id
        source.complete(lease, {"text": "ok"})
        clock.advance(1.0)
    waiting = [source.submit("demo", {"prompt": f"waits {i}"}).job.id for i in range(3)]
    clock.advance(1.0)
    out = io.BytesIO()
    write_export(source.find_jobs(), out, "jsonl", with_input=True)
    order = [j.id for j in source.list()]
    source.close()
    target = Queue.open(tmp_path / "b", clock=clock)
    try:
        result = target.import_jobs(read_export(out.getvalue()))
        assert len(result.added) == 6
        assert [j.id for j in target.list()] == order
        leased = [target.lease("w") for _ in range(3)]
        assert [lease.job_id for lease in leased if lease is not None] == waiting  # oldest first, as at the source
    finally:
        target.close()
