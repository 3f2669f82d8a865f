"""Job and event views: plain frozen dataclasses, copies of the job as it was when taken."""

from __future__ import annotations

import dataclasses

from desktop_queue.core import Queue
from desktop_queue.core.model import Event, Job
from desktop_queue.core.results import ResultStore


def test_views_are_plain_dataclasses_with_every_field(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = queue.lease("w")
    assert lease is not None
    done = queue.complete(lease, {"text": "r"})
    for view in (job, lease.job, done):
        assert view.state in ("queued", "running", "succeeded")
        assert set(vars(view)) == {f.name for f in dataclasses.fields(Job)}  # the timeline is not built yet
        rebuilt = Job(**{f.name: getattr(view, f.name) for f in dataclasses.fields(Job)})
        assert rebuilt == view and repr(rebuilt) == repr(view)
        for event in view.events:
            assert set(vars(event)) == {f.name for f in dataclasses.fields(Event)}
            assert Event(**vars(event)) == event
    assert [e.type for e in done.events] == ["submitted", "leased", "succeeded"]
    # frozen all the same
    try:
        done.state = "queued"  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a view must not be writable")


def test_result_file_names_keep_tame_keys_and_hash_the_rest() -> None:
    safe = ResultStore._safe
    assert safe("ab12") == "ab12"
    assert safe("my-key_1.v2") == "my-key_1.v2"
    assert safe("clé") == "clé"  # str.isalnum is Unicode-aware, as before
    for wild in (".hidden", "a/b", "a b", "", "x" * 129, "..", "a\\b"):
        assert safe(wild).startswith("k-") and len(safe(wild)) == 66


def test_a_view_read_late_shows_the_job_as_it_was_when_taken(queue: Queue) -> None:
    job = queue.submit("demo", {"prompt": "p"}).job
    lease = queue.lease("w")
    assert lease is not None
    queue.complete(lease, {"text": "r"})
    # read only now, after two commits changed the stored job in place
    assert (job.state, job.attempts, job.lease_epoch, job.result_ref) == ("queued", 0, 0, None)
    assert [e.type for e in job.events] == ["submitted"]
    assert (lease.job.state, lease.job.attempts) == ("running", 1)
    assert [e.type for e in lease.job.events] == ["submitted", "leased"]
    assert queue.get(job.id).state == "succeeded"
    assert job != queue.get(job.id)
    try:
        job.no_such_field  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("a view has its fields and nothing else")
