"""Job and event views: plain frozen dataclasses, copies of the job as it was when taken."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core import Queue
from desktop_queue.core.model import Event, Job
from desktop_queue.core.results import ResultStore
from desktop_queue.core.store.views import check_job_shape, job_views


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


# -- job_views: the list verbs' bulk builder ---------------------------------------------

_maybe_time = st.none() | st.floats(min_value=0, max_value=4e9, allow_nan=False)
_optional = {
    "title": st.text(max_size=8),
    "input": st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3),
    "key_source": st.sampled_from(["fingerprint", "caller"]),
    "attempts": st.integers(0, 9),
    "total_attempts": st.integers(0, 9),
    "run": st.integers(1, 4),
    "updated_at": st.floats(0, 4e9),
    "run_after": st.floats(0, 4e9),
    "deadline_at": _maybe_time,
    "lease_epoch": st.integers(0, 99),
    "lease_expires_at": _maybe_time,
    "lease_token": st.text(min_size=1, max_size=8),
    "worker": st.none() | st.text(max_size=6),
    "last_error": st.none()
    | st.fixed_dictionaries(
        {"class": st.just("fatal"), "message": st.text(max_size=6), "status": st.none() | st.integers(400, 599)}
    ),
    "result_ref": st.none() | st.text(max_size=8),
    "provider_job_id": st.none() | st.text(max_size=8),
    "replay_of": st.none() | st.text(max_size=8),
    "replayed_as": st.lists(st.text(max_size=4), max_size=2),
    "poison_count": st.integers(0, 3),
    "started_at": _maybe_time,
    "finished_at": _maybe_time,
    "resolved_at": _maybe_time,
    "events": st.lists(
        st.fixed_dictionaries({"type": st.sampled_from(["submitted", "leased"]), "at": st.floats(0, 4e9)}), max_size=3
    ).map(orjson.dumps)
    | st.lists(st.fixed_dictionaries({"type": st.just("submitted"), "at": st.floats(0, 4e9)}), max_size=2),
}


@st.composite
def _stored_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """A stored job as the snapshot, the journal or the archive may hold it: the required
    fields, and any of the others, present or left out."""
    job: dict[str, Any] = {
        "id": draw(st.text(min_size=1, max_size=10)),
        "seq": draw(st.integers(1, 10**9)),
        "kind": draw(st.sampled_from(["demo", "chat", "image"])),
        "priority": draw(st.sampled_from(["interactive", "background"])),
        "key": draw(st.text(min_size=1, max_size=10)),
        "max_attempts": draw(st.integers(1, 9)),
        "state": draw(st.sampled_from(["queued", "running", "succeeded", "dead", "cancelled"])),
        "created_at": draw(st.floats(0, 4e9)),
    }
    for name in draw(st.sets(st.sampled_from(sorted(_optional)))):
        job[name] = draw(_optional[name])
    return job


@settings(max_examples=300, deadline=None)
@given(st.lists(_stored_jobs(), max_size=4), st.booleans())
def test_job_views_build_what_the_constructor_builds(raws: list[dict[str, Any]], with_events: bool) -> None:
    slow = [Job.from_dict(copy.deepcopy(raw), with_events=with_events) for raw in raws]  # type: ignore[arg-type]
    fast = job_views([copy.deepcopy(raw) for raw in raws], with_events=with_events)  # type: ignore[misc]
    assert fast == slow
    for a, b in zip(fast, slow, strict=True):
        assert type(a) is Job
        assert vars(a) == vars(b) and repr(a) == repr(b)
        assert a.events == b.events  # the timeline, built on first use, the same way


def test_a_bulk_view_is_a_frozen_dataclass_like_any_other(queue: Queue) -> None:
    queue.submit("demo", {"prompt": "p"})
    (view,) = queue.list("queued")
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.state = "dead"  # type: ignore[misc]
    assert dataclasses.replace(view, title="t").title == "t"
    assert pickle.loads(pickle.dumps(view)) == view
    assert copy.copy(view) == view == dataclasses.replace(queue.get(view.id), raw_events=())
    (full,) = queue.list("queued", with_events=True)
    assert full == queue.get(view.id)
    assert [e.type for e in full.events] == ["submitted"]


def test_job_views_refuses_a_job_whose_init_does_more_than_store_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    check_job_shape()  # Job as it is
    monkeypatch.setattr(Job, "__post_init__", lambda self: None, raising=False)
    with pytest.raises(TypeError, match="__post_init__"):
        check_job_shape()
