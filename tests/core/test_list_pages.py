"""``Queue.list_pages``: what ``list`` returns, read a page at a time.

``list --all`` of a million stored jobs held every one of them at once (6.4 GiB, 66 s):
the pages must give exactly what ``list`` gives, in its order, while only a page of the
archive is read at a time, and jobs the archive takes or gives back between two pages
must each be listed once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from desktop_queue.core import FakeClock, Queue
from desktop_queue.core.outcome import Outcome
from desktop_queue.core.store.archive import Archive


def fill(queue: Queue, clock: FakeClock, n: int, tag: str = "j") -> list[str]:
    """``n`` jobs: every third one dies, every third one stays queued (due in a day), the rest succeed."""
    ids = []
    for i in range(n):
        later = clock.now() + 86400 if i % 3 == 2 else None
        job = queue.submit("demo", {"prompt": f"{tag}{i}"}, title=f"{tag} {i}", run_after=later).job
        ids.append(job.id)
        clock.advance(1.0)
        if later is not None:
            continue
        lease = queue.lease("w")
        assert lease is not None and lease.job_id == job.id
        if i % 3 == 1:
            queue.fail(lease, Outcome.failure("fatal", f"refused {i}", status=400))
        else:
            queue.complete(lease, {"text": f"answer {i}"})
    return ids


def paged(queue: Queue, state: str | None = None, **kwargs: Any) -> list[str]:
    return [j.id for page in queue.list_pages(state, **kwargs) for j in page]


@pytest.mark.parametrize("state", [None, "queued", "succeeded", "dead"])
def test_pages_give_what_list_gives_on_every_backend(any_queue: Queue, clock: FakeClock, state: str | None) -> None:
    fill(any_queue, clock, 14)
    every = [j.id for j in any_queue.list(state)]
    assert every  # (each state has some)
    assert paged(any_queue, state, page=3) == every
    assert paged(any_queue, state, page=100) == every
    assert paged(any_queue, state, page=3, limit=4) == every[:4]
    assert paged(any_queue, state, page=3, limit=3) == [j.id for j in any_queue.list(state, limit=3)]


def test_an_empty_queue_gives_one_empty_page(any_queue: Queue) -> None:
    assert list(any_queue.list_pages()) == [[]]
    assert list(any_queue.list_pages("dead", page=5)) == [[]]


@pytest.fixture
def small_hot(open_queue: Callable[..., Queue]) -> Queue:
    """A queue that keeps 2 finished jobs hot and compacts inline when asked."""
    return open_queue(keep_finished=2, keep_finished_s=0.0, background_compaction=False)


def test_pages_of_the_archive_read_one_page_of_it_at_a_time(
    small_hot: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(small_hot, clock, 60)
    small_hot.store.compact_now()
    hot = small_hot.store.peek(lambda st: len(st.hot_jobs()))
    assert hot < 30  # (most of them are archived: the case this is about)
    every = [j.id for j in small_hot.list()]
    read: list[int] = []
    real_jobs = Archive.jobs

    def counted(self: Archive, rows: Any) -> Any:
        rows = list(rows)
        read.append(len(rows))
        return real_jobs(self, rows)

    monkeypatch.setattr(Archive, "jobs", counted)
    pages = list(small_hot.list_pages(page=8))
    assert [j.id for p in pages for j in p] == every
    assert all(len(p) <= max(8, hot // 2) for p in pages)
    assert max(read) <= max(8, hot // 2) + 16  # (one page, and the few the hot set holds a newer copy of)
    assert len(pages) >= len(every) // max(8, hot // 2)


def test_jobs_archived_or_retried_between_two_pages_are_listed_once_in_place(
    small_hot: Queue, clock: FakeClock
) -> None:
    fill(small_hot, clock, 30)
    small_hot.store.compact_now()
    before = [j.id for j in small_hot.list()]
    pages = small_hot.list_pages(page=5)
    seen = [j.id for j in next(pages)]
    # between two pages: new jobs finish, older hot ones leave for the archive, and an
    # archived dead letter further down is retried (back in the hot set)
    fill(small_hot, clock, 9, tag="late")
    small_hot.store.compact_now()
    dead_below = next(j for j in small_hot.list("dead") if j.id not in seen and j.id in before)
    assert not small_hot.hot_among([dead_below.id])
    small_hot.retry(dead_below.id, "test")
    assert small_hot.hot_among([dead_below.id])
    seen += [j.id for page in pages for j in page]
    assert seen == before  # (the late jobs came after the listing began)
    assert len(set(seen)) == len(seen)


def test_a_limited_list_is_the_first_page_when_old_jobs_wait_in_the_hot_set(small_hot: Queue, clock: FakeClock) -> None:
    """``list(limit=N)`` (the API's ``GET /jobs``) took the hot set's newest N and asked the
    archive only for what was missing: jobs queued long ago filled the page ahead of the
    newer jobs the archive held."""
    waiting = [
        small_hot.submit("demo", {"prompt": f"later {i}"}, run_after=clock.now() + 86400).job.id for i in range(3)
    ]
    fill(small_hot, clock, 12, tag="now")
    small_hot.store.compact_now()
    newest = [j.id for j in small_hot.list(limit=3)]
    assert newest == [j.id for j in next(small_hot.list_pages(limit=3))]
    assert not set(newest) & set(waiting)
