"""Dead letters and history: resolve, bulk retry/replay in chunks, groups, deleting, searching."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import FakeClock, InvalidInput, NotAllowed, Outcome, Queue, State
from desktop_queue.core.model import EventType
from desktop_queue.core.search import SearchQuery, prompt_text
from desktop_queue.core.store import archive as archive_module
from desktop_queue.core.store.archive import INDEX_VERSION
from desktop_queue.providers.demo import DemoProvider

PROVIDERS = {"demo": DemoProvider()}


@pytest.fixture
def small_hot(open_queue: Callable[..., Queue]) -> Callable[..., Queue]:
    """Queues that keep 3 finished jobs hot and compact inline."""

    def _open(**kwargs: Any) -> Queue:
        kwargs.setdefault("keep_finished", 3)
        kwargs.setdefault("background_compaction", False)
        kwargs.setdefault("providers", PROVIDERS)
        return open_queue(**kwargs)

    return _open


def kill(
    queue: Queue, clock: FakeClock, prompt: str, status: int = 401, message: str | None = None, title: str | None = None
) -> str:
    """Submits a job and dead-letters it with a fatal error."""
    job = queue.submit("demo", {"prompt": prompt}, title=title or prompt[:30]).job
    lease = queue.lease("w")
    assert lease is not None and lease.job_id == job.id
    clock.advance(1)
    queue.fail(lease, Outcome.failure("fatal", message or f"demo: HTTP {status} for {prompt[:8]}", status=status))
    return job.id


def test_resolve_flags_records_and_stops_counting(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot(keep_finished=100)
    a, b = kill(queue, clock, "alpha"), kill(queue, clock, "beta")
    assert queue.counts()["dead"] == 2
    job = queue.resolve(a, note="  known outage,\n not worth retrying ")
    assert job.state == State.DEAD and job.resolved_at is not None
    event = job.events[-1]
    assert event.type == EventType.RESOLVED and event.actor == "user"
    assert event.detail["note"] == "known outage, not worth retrying"
    counts = queue.counts()
    assert counts["dead"] == 1 and counts["resolved"] == 1
    stats = queue.stats()
    assert stats.dead_letters == 1 and stats.counts["resolved"] == 1
    with pytest.raises(NotAllowed, match="resolved already"):
        queue.resolve(a)
    queued = queue.submit("demo", {"prompt": "gamma"}).job
    with pytest.raises(NotAllowed, match="only dead letters"):
        queue.resolve(queued.id)
    # a retry makes it a new run: if it dies again, it waits for a person again
    retried = queue.retry(a)
    assert retried.resolved_at is None
    assert "resolved" not in queue.counts()
    assert b in queue.dead_letter_ids()


def test_an_archived_dead_letter_is_resolved_and_the_index_knows(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    queue = small_hot()
    ids = [kill(queue, clock, f"job {i}") for i in range(8)]
    queue.store.compact_now()
    oldest = ids[0]
    assert oldest not in queue.store.state.jobs  # archived
    assert queue.counts()["dead"] == 8
    queue.resolve(oldest)
    assert queue.counts()["dead"] == 7
    assert oldest not in queue.dead_letter_ids()
    assert queue.dead_letter_ids(resolved=True) == [oldest]
    queue.store.compact_now()  # archived again, resolved: the index has it so
    assert oldest not in queue.store.state.jobs
    assert queue.counts() == {**queue.counts(), "dead": 7, "resolved": 1}
    assert [r.id for r in queue.history(state="dead", resolved=True)] == [oldest]
    assert oldest not in {r.id for r in queue.history(state="dead", resolved=False)}
    queue.close()
    again = small_hot()
    assert again.counts()["dead"] == 7 and again.stats().dead_letters == 7


def test_retry_many_commits_a_chunk_at_a_time(
    small_hot: Callable[..., Queue], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = small_hot(keep_finished=10_000)
    payloads = [{"prompt": f"p{i}", "fail_with": "fatal"} for i in range(1_100)]
    jobs = [r.job.id for r in queue.submit_many("demo", payloads)]
    for _ in jobs:
        lease = queue.lease("w")
        assert lease is not None
        queue.fail(lease, Outcome.failure("fatal", "demo: refused", status=400))
    commits: list[int] = []
    real = queue.store.transact

    def counting(fn: Any, **kwargs: Any) -> Any:
        records = real(fn, **kwargs)
        commits.append(len(records))
        return records

    monkeypatch.setattr(queue.store, "transact", counting)
    seen: list[tuple[int, int]] = []
    result = queue.retry_many([*jobs, jobs[0]], chunk=500, progress=lambda d, t: seen.append((d, t)))
    assert commits == [500, 500, 100]  # three durable commits, not 1,100
    assert seen == [(500, 1100), (1000, 1100), (1100, 1100)]
    assert result.done == jobs and not result.skipped and not result.cancelled
    assert queue.counts()["queued"] == 1_100
    job = queue.get(jobs[0])
    assert job.run == 2 and job.events[-1].type == EventType.RETRIED


def test_retry_many_skips_what_changed_and_stops_between_chunks(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    queue = small_hot(keep_finished=100)
    dead = [kill(queue, clock, f"d{i}") for i in range(6)]
    queue.retry(dead[0])
    result = queue.retry_many(dead, chunk=2, stop=lambda: queue.counts()["queued"] >= 3)
    assert result.cancelled
    assert dead[0] in result.skipped and "only dead or cancelled" in result.skipped[dead[0]]
    assert result.done == dead[1:4]  # chunks [d0 (skipped), d1], [d2, d3]; then it stopped
    assert queue.get(dead[4]).state == State.DEAD and queue.get(dead[5]).state == State.DEAD


def test_retry_many_never_makes_two_live_jobs_of_one_key(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot(keep_finished=100)
    first = kill(queue, clock, "same input")
    second = kill(queue, clock, "same input")  # the key was free again once the first died
    result = queue.retry_many([first, second])
    assert result.done == [first]
    assert "holds" in result.skipped[second]


def test_replay_many_makes_linked_jobs(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    dead = [kill(queue, clock, f"r{i}") for i in range(6)]
    queue.store.compact_now()  # some originals archived
    result = queue.replay_many(dead, chunk=4)
    assert result.done == dead and set(result.created) == set(dead)
    for original_id, new_id in result.created.items():
        new = queue.get(new_id)
        assert new.replay_of == original_id and new.state == State.QUEUED
        assert new.priority == "background"
        original = queue.get(original_id)
        assert new_id in original.replayed_as and original.state == State.DEAD
    assert len(set(result.created.values())) == 6


def test_purge_jobs_removes_only_the_selection(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    dead = [kill(queue, clock, f"x{i}") for i in range(6)]
    queued = queue.submit("demo", {"prompt": "still waiting"}).job.id
    queue.store.compact_now()
    assert queue.purge_jobs([dead[0], dead[5], queued], dry_run=True) == 2
    assert queue.purge_jobs([dead[0], dead[5], queued]) == 2
    left = {j.id for j in queue.list()}
    assert dead[0] not in left and dead[5] not in left
    assert set(dead[1:5]) | {queued} <= left


def test_groups_by_error_signature_hot_and_archived(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    auth = [kill(queue, clock, f"a{i}", 401, message=f"unauthorized request req_{i}abc123") for i in range(5)]
    limit = [kill(queue, clock, f"l{i}", 429, message="rate limited") for i in range(3)]
    queue.store.compact_now()
    groups = queue.dead_letter_groups()
    assert [(g.count, g.error_class) for g in groups] == [(5, "fatal"), (3, "fatal")]
    assert groups[0].label.endswith("×5")
    assert set(queue.dead_letter_ids(signature=groups[0].signature)) == set(auth)
    queue.resolve(auth[0])
    queue.retry(limit[0])
    groups = {g.signature: g.count for g in queue.dead_letter_groups()}
    assert sorted(groups.values()) == [2, 4]
    assert [g.count for g in queue.dead_letter_groups(resolved=True)] == [1]


def test_search_finds_the_prompt_in_memory_and_in_the_archive(
    small_hot: Callable[..., Queue], clock: FakeClock
) -> None:
    queue = small_hot()
    words = ("zebras", "owls", "quokkas", "lynxes", "newts")
    ids = [kill(queue, clock, f"write about {word}", title="animal study") for word in words]
    queue.store.compact_now()
    hot = set(queue.store.state.jobs)
    assert ids[0] not in hot and ids[4] in hot
    # the titles say nothing of the animal: the prompt is searched
    assert [r.id for r in queue.history(text="zebra")] == [ids[0]]
    assert [r.id for r in queue.history(text="ZEBRA")] == [ids[0]]
    assert queue.prompt_matches("NEWTS") == {ids[4]}
    assert queue.prompt_matches("zebras") == set()  # (archived: history finds it)
    found = list(queue.find_jobs(SearchQuery.parse("state:dead owls")))
    assert [j.id for j in found] == [ids[1]]


def test_an_old_index_is_rebuilt_with_the_prompts(
    small_hot: Callable[..., Queue], clock: FakeClock, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = small_hot()
    words = ("aardvark", "badger", "cheetah", "dingo", "emu")
    ids = [kill(queue, clock, f"topic {word}", title="a topic") for word in words]
    queue.store.compact_now()
    queue.close()
    index = data_dir / "store" / "archive" / "index.sqlite3"
    db = sqlite3.connect(index)
    db.execute("UPDATE meta SET v = ? WHERE k = 'version'", (str(INDEX_VERSION - 1),))
    db.commit()
    db.close()
    again = small_hot()
    assert [r.id for r in again.history(text="aardvark")] == [ids[0]]
    monkeypatch.setattr(archive_module, "SCAN_FIRST", 0)  # the trigram index answers, not a scan
    assert [r.id for r in again.history(text="badger")] == [ids[1]]
    assert [r.id for r in again.history(text="a topic", limit=10)] == ids[:2][::-1]


def test_prompt_text_reads_every_kind_of_input() -> None:
    assert prompt_text({"prompt": "hello"}) == "hello"
    assert prompt_text({"text": "say this", "voice": "alloy"}) == "say this"
    chat = {"system": "be brief", "messages": [{"role": "user", "content": "hi"}, {"content": [{"text": "there"}]}]}
    assert prompt_text(chat) == "be brief\nhi\nthere"
    assert prompt_text(["not", "a", "dict"]) == ""
    assert len(prompt_text({"prompt": "x" * 10_000})) == 4096


def test_search_query_parses_fields_and_dates() -> None:
    q = SearchQuery.parse("kind:demo state:DEAD profile:openai after:2026-11-01 before:2026-11-30 refund error:42")
    assert (q.kind, q.state, q.profile) == ("demo", "dead", "openai")
    assert q.text == "refund error:42"
    assert q.after is not None and q.before is not None and q.before - q.after == 30 * 86_400
    with pytest.raises(InvalidInput, match="after"):
        SearchQuery.parse("after:yesterday")
    job = {"kind": "demo", "state": "dead", "created_at": q.after + 10, "input": {"prompt": "a Refund please"}}
    assert SearchQuery.parse("kind:demo refund").matches(job)
    assert not SearchQuery.parse("kind:openai.chat").matches(job)


def test_resolved_dead_letters_are_purged_like_finished_jobs(small_hot: Callable[..., Queue], clock: FakeClock) -> None:
    queue = small_hot()
    ids = [kill(queue, clock, f"p{i}") for i in range(6)]
    queue.store.compact_now()
    queue.resolve(ids[0])  # archived, faulted in
    queue.resolve(ids[5])  # hot
    queue.store.compact_now()
    assert queue.counts()["resolved"] == 2
    clock.advance(10)
    assert queue.purge(clock.now(), ["dead"]) == 6
    counts = queue.counts()
    assert counts["dead"] == 0 and "resolved" not in counts
    assert queue.dead_letter_groups(resolved=True) == []
    assert queue.stats().dead_letters == 0
