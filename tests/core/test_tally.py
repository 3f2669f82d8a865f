"""JobTally: the window's counts kept from the change feed equal a full recount."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core.present import RECENT_WINDOW_S, JobTally, recount

NOW = 1_800_000_000.0
IDS = [f"j{i}" for i in range(12)]

job_dicts = st.builds(
    lambda job_id, state, priority, kind, finished, run_after: {
        "id": job_id,
        "state": state,
        "priority": priority,
        "kind": kind,
        "finished_at": None if finished is None else NOW + finished,
        "run_after": NOW + run_after,
    },
    st.sampled_from(IDS),
    st.sampled_from(["queued", "running", "succeeded", "dead", "cancelled"]),
    st.sampled_from(["interactive", "background"]),
    st.sampled_from(["demo", "openai.chat", "remote"]),
    st.none() | st.floats(-3 * RECENT_WINDOW_S, 3 * RECENT_WINDOW_S),
    st.floats(-30, 30),
)


def answers(tally: JobTally, now: float) -> dict[str, Any]:
    return {
        "counts": tally.counts(),
        "done": tally.done_since(now - RECENT_WINDOW_S),
        "interactive_ahead": tally.interactive_ahead(now),
        "active_kinds": tally.active_kinds(),
    }


@settings(max_examples=300, deadline=None)
@given(
    first=st.lists(job_dicts, max_size=12),
    batches=st.lists(st.tuples(st.lists(job_dicts, max_size=6), st.floats(0, 40)), max_size=8),
)
def test_counts_kept_from_changes_equal_a_full_recount(
    first: list[dict], batches: list[tuple[list[dict], float]]
) -> None:
    tally = JobTally()
    tally.reset(first)
    latest = {j["id"]: j for j in first}
    now = NOW
    assert answers(tally, now) == recount(latest.values(), now)
    for changed, step in batches:  # the clock moves forward between ticks, as it does
        now += step
        tally.apply(changed)
        latest.update({j["id"]: j for j in changed})
        assert answers(tally, now) == recount(latest.values(), now)


def test_a_reset_forgets_the_jobs_before_it() -> None:
    tally = JobTally()
    tally.apply([{"id": "a", "state": "queued", "priority": "interactive", "kind": "demo", "run_after": NOW}])
    tally.reset([{"id": "b", "state": "succeeded", "kind": "demo", "finished_at": NOW}])
    assert tally.counts() == {"succeeded": 1}
    assert tally.queued_interactive() == [] and tally.active_kinds() == set()
    assert tally.done_since(NOW - 60) == 1
