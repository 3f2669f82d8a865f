"""The window's history on PostgreSQL: it holds the unfinished jobs and the newest finished
ones, and pages the older ones newest first, filtered by the server (schema version 8).

On the data dir the window pages the archive (tests/ui/test_history.py); on PostgreSQL
every job stays in its table, and the window read all of them at once (17 s at a
million jobs). These tests hold the same promises over the table: every finished job is
reachable a page at a time and once, and each filter answers what a scan of every job
would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from PySide6.QtCore import QModelIndex

from desktop_queue.core import Outcome, Queue
from desktop_queue.core.model import State
from desktop_queue.core.pg import view as pg_view
from desktop_queue.core.present import error_signature
from desktop_queue.core.search import prompt_text
from desktop_queue.ui.models import DeadLetterModel, JobFilterProxy, JobRole, QueueModel, RefreshCoordinator
from desktop_queue.ui.models.refresh import Pace

HOT = pg_view.HOT_FINISHED
JOBS = HOT + 45
FINISHED = {str(State.SUCCEEDED), str(State.DEAD), str(State.CANCELLED)}
ROOT = QModelIndex()


def build(queue: Queue) -> dict[str, Any]:
    """JOBS jobs run to the end in submission order (every sixth dead, every tenth from the
    fifth cancelled, a third of the dead ones resolved; titles "pear …" or "apple …", kinds
    "demo" and "echo"), then two queued jobs and a running one."""
    made: dict[str, Any] = {"finished": [], "queued": [], "running": []}
    clock = queue.clock
    for i in range(JOBS):
        clock.advance(1.0)  # type: ignore[attr-defined]  # (a FakeClock: each job ends a second later)
        fruit = "pear" if i % 3 == 0 else "apple"
        payload: dict[str, Any] = {"prompt": f"job {i}"}
        if i == 7:
            payload = {"prompt": 'say "hi" to Ñandú', "model": "needle-model"}
        if i == 8:
            payload = {"messages": [{"role": "user", "content": "a lighthouse at dusk"}], "profile": "studio"}
        job_id = queue.submit("echo" if i % 4 == 1 else "demo", payload, title=f"{fruit} {i}").job.id
        if i % 10 == 5:
            queue.cancel(job_id)
        else:
            lease = queue.lease("w")
            assert lease is not None and lease.job_id == job_id
            if i % 6 == 0:
                queue.fail(lease, Outcome.failure("fatal", f"demo: simulated invalid request {i} (req_{i:06d}x)"))
                if i % 18 == 0:
                    queue.resolve(job_id)
            else:
                queue.complete(lease, {"text": f"ok {i}"})
        made["finished"].append(job_id)
    for i in range(3):
        made["queued"].append(queue.submit("demo", {"prompt": f"waiting {i}"}, title=f"pear waiting {i}").job.id)
    lease = queue.lease("w")
    assert lease is not None
    made["running"] = [lease.job_id]
    made["queued"].remove(lease.job_id)
    return made


@pytest.fixture
def pg_history(open_pg: Callable[..., Queue]) -> tuple[Queue, dict[str, Any]]:
    queue = open_pg()
    return queue, build(queue)


def _finished_jobs(queue: Queue, ids: list[str]) -> list[dict[str, Any]]:
    """Every finished job, newest first, read one by one (the scan the history must agree with)."""
    jobs = [{**job.to_json(), "seq": job.seq} for job in map(queue.get, ids)]
    return sorted(jobs, key=lambda j: j["seq"], reverse=True)


def test_the_window_holds_the_unfinished_and_the_newest_finished_jobs(
    pg_history: tuple[Queue, dict[str, Any]],
) -> None:
    queue, made = pg_history
    hot = queue.raw_jobs()
    newest = [j["id"] for j in _finished_jobs(queue, made["finished"])[:HOT]]
    assert {j["id"] for j in hot} == set(made["queued"]) | set(made["running"]) | set(newest)
    assert len(hot) == HOT + 3
    seqs = [j["seq"] for j in hot]
    assert seqs == sorted(seqs)  # (as the data dir hands its hot set over: in submission order)
    assert all("input" not in j for j in hot if j["state"] != State.QUEUED)
    # the prompt search of the hot rows reads the hot jobs' inputs, not every job's
    assert queue.prompt_matches("job 1") == {i for i in newest if "job 1" in queue.get(i).input.get("prompt", "")}
    # the counts stay those of every job
    counts = queue.counts()
    assert sum(counts.values()) == JOBS + 3
    assert counts["queued"] == 2 and counts["running"] == 1


def test_every_finished_job_is_paged_newest_first_and_once(pg_history: tuple[Queue, dict[str, Any]]) -> None:
    queue, made = pg_history
    pages: list[str] = []
    before = None
    while True:
        rows = queue.history(before_seq=before, limit=37)
        pages += [r.id for r in rows]
        if len(rows) < 37:
            break
        before = rows[-1].seq
    assert pages == [j["id"] for j in _finished_jobs(queue, made["finished"])]
    # a page of every state, newest first, through the index: the unfinished ones among them
    everyone = sorted(
        (queue.get(i) for i in made["finished"] + made["queued"] + made["running"]), key=lambda j: j.seq, reverse=True
    )
    assert [j.id for j in queue.list(None, limit=5)] == [j.id for j in everyone[:5]]
    assert {j.id for j in queue.list(None, limit=3)} == set(made["queued"]) | set(made["running"])
    assert [j.id for j in queue.list("succeeded", limit=4)] == [j.id for j in everyone if j.state == "succeeded"][:4]


def _reference(jobs: list[dict[str, Any]], **f: Any) -> list[str]:
    """What the data dir's archive index answers for the filters ``f`` (Archive.rows), by a scan."""

    def keep(j: dict[str, Any]) -> bool:
        error = j.get("last_error") or {}
        profile = j.get("profile") or (j.get("input") or {}).get("profile")
        text = f.get("text")
        return (
            (f.get("state") is None or j["state"] == f["state"])
            and (f.get("kind") is None or j["kind"] == f["kind"])
            and (f.get("profile") is None or profile == f["profile"])
            and (f.get("error_class") is None or error.get("class") == f["error_class"])
            and (f.get("resolved") is None or (j.get("resolved_at") is not None) == f["resolved"])
            and (f.get("created_after") is None or j["created_at"] >= f["created_after"])
            and (f.get("created_before") is None or j["created_at"] < f["created_before"])
            and (f.get("signature") is None or (j["state"] == State.DEAD and error_signature(j) == f["signature"]))
            and (
                not text
                or text.casefold() in (j.get("title") or "").casefold()
                or text.casefold() in prompt_text(j.get("input")).casefold()
            )
        )

    return [j["id"] for j in jobs if keep(j)]


@pytest.mark.parametrize("scan", [pg_view._HISTORY_SCAN, 7])
def test_each_filter_answers_what_a_scan_of_every_job_answers(
    pg_history: tuple[Queue, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, scan: int
) -> None:
    queue, made = pg_history
    monkeypatch.setattr(pg_view, "_HISTORY_SCAN", scan)  # 7: filters checked here span many statements
    jobs = _finished_jobs(queue, made["finished"])
    dead = [j for j in jobs if j["state"] == State.DEAD]
    middle = jobs[len(jobs) // 2]["created_at"]
    cases: list[dict[str, Any]] = [
        {},
        {"state": "dead"},
        {"state": "cancelled"},
        {"state": "succeeded", "kind": "echo"},
        {"state": "dead", "resolved": False},
        {"state": "dead", "resolved": True},
        {"error_class": "fatal"},
        {"profile": "studio"},
        {"created_after": middle},
        {"created_before": middle, "kind": "demo"},
        {"text": "PEAR 1"},  # the title, in any case
        {"text": "job 10"},  # the prompt: job 10, 100..109
        {"text": "lighthouse"},  # a chat message's text
        {"text": '"hi" to ñandú'},  # quoted, and not ASCII
        {"text": "needle"},  # in the input, but not in its prompt: not found
        {"text": "50%"},  # the wildcards of LIKE are plain characters
        {"text": "zzz-none"},
        {"state": "dead", "signature": error_signature(dead[0])},
        {"state": "dead", "signature": error_signature(dead[0]), "text": "apple"},
    ]
    for f in cases:
        want = _reference(jobs, **f)
        assert [r.id for r in queue.history(limit=None, **f)] == want, f  # type: ignore[arg-type]
        assert [r.id for r in queue.history(limit=3, **f)] == want[:3], f
    assert _reference(jobs, text="needle") == [] and _reference(jobs, text='"hi" to ñandú') != []
    row = queue.history(state="dead", limit=1)[0]
    job = queue.get(row.id)
    assert (row.state, row.kind, row.title, row.created_at, row.finished_at) == (
        job.state, job.kind, job.title, job.created_at, job.finished_at,
    )  # fmt: skip
    assert row.error_class == "fatal" and row.signature == error_signature(job.to_json())
    assert queue.history(state="queued") == [] and queue.history(state="running") == []


def _all_ids(model: Any) -> list[str]:
    return [model.index(r, 0).data(JobRole.ID) for r in range(model.rowCount())]


def _fetch_all(model: Any) -> None:
    while model.canFetchMore(ROOT):
        model.fetchMore(ROOT)


def test_the_panes_page_the_older_jobs_once_each(qtmodeltester: Any, pg_history: tuple[Queue, dict[str, Any]]) -> None:
    queue, made = pg_history
    everyone = made["finished"] + made["queued"] + made["running"]
    model = QueueModel(history=queue, page_size=20)
    dead_model = DeadLetterModel(history=queue, page_size=4)
    refresher = RefreshCoordinator(queue, [model, dead_model])
    refresher.refresh()
    assert model.hot_count() == HOT + 3 and model.archived_count() == 0
    assert model.canFetchMore(ROOT)
    model.fetchMore(ROOT)
    assert 0 < model.archived_count() <= 20  # one page, not the table
    qtmodeltester.check(model)
    _fetch_all(model)
    ids = _all_ids(model)
    assert len(ids) == len(everyone) and set(ids) == set(everyone)
    seqs = [model.job_at(r)["seq"] for r in range(model.hot_count(), model.rowCount())]
    assert seqs == sorted(seqs, reverse=True)
    older = model.job_at(model.hot_count())
    assert older["archived"] and older["attempts"] >= 0  # the whole job, read by id

    # the dead letters: the hot ones, then every older one, once; "Retry all matching" finds them all
    _fetch_all(dead_model)
    dead = [j for j in _finished_jobs(queue, made["finished"]) if j["state"] == State.DEAD]
    assert sorted(_all_ids(dead_model)) == sorted(j["id"] for j in dead)  # (the resolved ones are hidden by its proxy)
    assert dead_model.hot_count() < len(dead)
    assert set(dead_model.archived_ids()) | {dead_model.job_at(r)["id"] for r in range(dead_model.hot_count())} == {
        j["id"] for j in dead
    }

    # the search field narrows the older rows through the server's filter
    proxy = JobFilterProxy()
    proxy.setSourceModel(model)
    proxy.set_text("pear 1")
    _fetch_all(model)
    want = {j["id"] for j in _finished_jobs(queue, made["finished"]) if "pear 1" in j["title"]}
    want |= {i for i in made["queued"] + made["running"] if "pear 1" in queue.get(i).title}
    assert set(proxy.job_ids()) == want

    # a job the window holds that another process retries comes back as a hot job, once
    retried = next(j["id"] for j in dead if j.get("resolved_at") is None)
    queue.retry(retried)
    refresher.refresh()
    _fetch_all(model)
    assert _all_ids(model).count(retried) == 1
    assert model.job_at(model.row_of(retried))["state"] == State.QUEUED


def test_the_window_upkeep_reads_the_hot_set_not_the_history(
    pg_history: tuple[Queue, dict[str, Any]], tmp_path: Any
) -> None:
    """The repair scan, the alerts' signals and the outbox of a window on PostgreSQL look at
    the jobs a data dir keeps hot: the upkeep failed on PostgreSQL (the usual run times read
    the data dir's job table), and the alerts' pass read every job a query at a time."""
    from desktop_queue.core.alerts import LOOKBACK_S, gather
    from desktop_queue.core.estimate import run_times_of
    from desktop_queue.core.outbox import ANNOUNCED, Outbox
    from desktop_queue.core.repair import RepairScan, Upkeep

    queue, made = pg_history
    hot = {j["id"]: j for j in queue.raw_jobs()}
    succeeded_hot = [j for j in hot.values() if j["state"] == State.SUCCEEDED]
    times = run_times_of(queue)
    usual = times.usual("echo", None)  # (fewer than the samples kept per kind)
    assert usual is not None and usual.samples == sum(1 for j in succeeded_hot if j["kind"] == "echo")

    signals = gather(queue, run_times=times)
    assert signals.backlog == 2
    assert [r[0] for r in signals.running] == made["running"]
    # every dead letter of the hour, hot or not (the hot set keeps the newest finished jobs)
    dead = [j for j in map(queue.get, made["finished"]) if j.state == State.DEAD]
    assert sorted(signals.dead_lettered) == sorted(
        j.finished_at for j in dead if j.finished_at >= signals.at - LOOKBACK_S
    )
    assert len(dead) > sum(1 for j in hot.values() if j["state"] == State.DEAD)

    outbox = Outbox(tmp_path / "outbox", lambda: 0.0)  # (started before every ending)
    outbox.start()
    upkeep = Upkeep(RepairScan(queue, outbox=outbox, providers={}))
    upkeep.tick()
    assert upkeep.last is not None
    announced = {e.notice.job_id for e in outbox.view().entries.values()}
    assert announced == {i for i, j in hot.items() if j["state"] in ANNOUNCED}
    # a job that ends later is announced by the next round, from the change feed
    lease = queue.lease("w2")
    assert lease is not None
    queue.complete(lease, {"text": "late"})
    upkeep.tick()
    assert lease.job_id in {e.notice.job_id for e in outbox.view().entries.values()}


@pytest.mark.parametrize("page", [pg_view.TIMELINE_PAGE, 7])
def test_stats_read_every_timeline_a_page_at_a_time(
    pg_history: tuple[Queue, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    """``stats`` on PostgreSQL held every whole job in memory at once (7.8 GB at a million):
    it streams the timelines now, and answers what the figures of every whole job say."""
    from desktop_queue.core.metrics import compute

    queue, _made = pg_history
    monkeypatch.setattr(pg_view, "TIMELINE_PAGE", page)  # 7: many pages
    every = queue.store.read(lambda st: [dict(j) for j in st.hot_jobs().values()])
    want = compute(every)
    resolved = sum(1 for j in every if j["state"] == State.DEAD and j.get("resolved_at") is not None)
    assert resolved > 0
    got = queue.stats()
    assert got.jobs == want.jobs == JOBS + 3
    figures = ("attempts", "retries", "throttled", "lease_expiries", "reconciled", "stale_results")
    assert [getattr(got, f) for f in figures] == [getattr(want, f) for f in figures]
    assert (got.wait_p50_s, got.wait_p95_s, got.run_p50_s, got.run_p95_s) == (
        want.wait_p50_s, want.wait_p95_s, want.run_p50_s, want.run_p95_s,
    )  # fmt: skip
    assert got.counts["resolved"] == resolved and got.counts["dead"] == want.counts["dead"] - resolved
    assert got.dead_letters == got.counts["dead"]
    assert {k: v for k, v in got.counts.items() if k not in ("dead", "resolved")} == {
        k: v for k, v in want.counts.items() if k != "dead"
    }


def test_the_dead_letter_groups_and_ids_read_the_dead_letters_at_once(
    pg_history: tuple[Queue, dict[str, Any]],
) -> None:
    """The error groups and "retry all matching" read every dead letter (on PostgreSQL all of
    them are hot) in one statement: they answer what a look at each one would."""
    from desktop_queue.core.search import SearchQuery

    queue, made = pg_history
    dead = [j for j in _finished_jobs(queue, made["finished"]) if j["state"] == State.DEAD]
    for resolved in (False, True):
        mine = [j for j in dead if (j.get("resolved_at") is not None) == resolved]
        groups: dict[str, int] = {}
        for j in mine:
            groups[error_signature(j)] = groups.get(error_signature(j), 0) + 1
        got = queue.dead_letter_groups(resolved=resolved)
        assert {g.signature: g.count for g in got} == groups
        assert [g.count for g in got] == sorted(groups.values(), reverse=True)
        assert queue.dead_letter_ids(resolved=resolved) == [j["id"] for j in mine]  # newest first
        one = error_signature(mine[0])
        assert queue.dead_letter_ids(signature=one, resolved=resolved) == [
            j["id"] for j in mine if error_signature(j) == one
        ]
    pears = queue.dead_letter_ids(query=SearchQuery.parse("pear"))
    assert pears == [j["id"] for j in dead if j.get("resolved_at") is None and "pear" in j["title"]]


def test_a_purge_is_matched_and_counted_by_the_server(pg_history: tuple[Queue, dict[str, Any]], pg_dsn: str) -> None:
    """A purge (and its dry run) read every finished job whole to match it (the command the
    README advises for a long history held that history in memory): the server matches
    them now, as ``PurgeFilter.matches`` says, and a purged job's result goes with it."""
    import psycopg

    from desktop_queue.core.store.archive import PurgeFilter

    queue, made = pg_history
    jobs = _finished_jobs(queue, made["finished"])
    cut = sorted(j["finished_at"] for j in jobs if j.get("finished_at") is not None)[len(jobs) // 2]

    def matching(purge: PurgeFilter) -> set[str]:
        every = queue.store.read(lambda st: [dict(j) for j in st.hot_jobs().values()])
        return {j["id"] for j in every if purge.matches(j)}

    dead_old = matching(PurgeFilter(cut, ("dead",)))
    assert dead_old and queue.purge(cut, ["dead"], dry_run=True) == len(dead_old)
    succeeded_old = matching(PurgeFilter(cut, ("succeeded",)))
    keys = {queue.get(i).idempotency_key for i in succeeded_old}
    assert queue.purge(cut, ["dead", "succeeded"]) == len(dead_old | succeeded_old)
    left = {j["id"] for j in queue.store.read(lambda st: [dict(j) for j in st.hot_jobs().values()])}
    assert not (dead_old | succeeded_old) & left
    assert left == set(made["finished"] + made["queued"] + made["running"]) - dead_old - succeeded_old
    with psycopg.connect(pg_dsn) as conn:  # (the test's schema is the first of its search path)
        stored = {r[0] for r in conn.execute("SELECT key FROM dq_results WHERE key = ANY(%s)", (list(keys),))}
    assert stored == set()
    # a person's selection: only those, only if finished
    chosen = [made["queued"][0], *sorted(left - set(made["queued"]) - set(made["running"]))[:3]]
    assert queue.purge_jobs(chosen, dry_run=True) == 3
    assert queue.purge_jobs(chosen) == 3
    assert queue.get(made["queued"][0]).state == State.QUEUED


@pytest.mark.parametrize("typed", ["", "state:dead", "pear", "kind:echo apple", "state:queued"])
def test_an_export_pages_the_jobs_newest_first(pg_history: tuple[Queue, dict[str, Any]], typed: str) -> None:
    """``find_jobs`` (what ``export`` writes) gathered every matching job of the table before
    the first one came out: it pages them now, newest first, a page a statement."""
    from desktop_queue.core.search import SearchQuery

    queue, made = pg_history
    query = SearchQuery.parse(typed)
    everyone = sorted(
        (queue.get(i) for i in made["finished"] + made["queued"] + made["running"]), key=lambda j: j.seq, reverse=True
    )
    want = [j.id for j in everyone if query.matches(j.to_json(), Queue._searchable(j.to_json()))]
    assert want
    assert [j.id for j in queue.find_jobs(query, page=7)] == want
    assert [j.id for j in queue.find_jobs(query)] == want
    resolved = [j.id for j in queue.find_jobs(query, resolved=True, page=7)]
    assert resolved == [i for i in want if queue.get(i).resolved_at is not None]
    exported = next(iter(queue.find_jobs(query, page=7)))
    assert exported.events  # (with its timeline, as export writes it)


def test_the_jobs_finished_since_a_time_are_found_through_an_index(
    pg_history: tuple[Queue, dict[str, Any]], pg_dsn: str
) -> None:
    """The status bar's successes of the last minute and the metrics' horizon (schema 9):
    both ask for the finished jobs that changed since a time, which read every finished
    job unless the statement spells the index's expression and states."""
    queue, made = pg_history
    now = queue.clock.now()
    for back in (10.5, 60, 100, 10_000):
        jobs = [queue.get(i) for i in made["finished"]]
        expected = {
            j.id: j.finished_at
            for j in jobs
            if j.state == State.SUCCEEDED and j.finished_at is not None and j.finished_at >= now - back
        }
        assert queue.finished_since(now - back) == expected
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("SET enable_seqscan = off")  # (so few rows would be read whole anyway)
        for sql, args in (
            (pg_view._FINISHED_SINCE, (now - 60, "succeeded", now - 60)),
            (pg_view._HORIZON_IDS, (now - 60,)),
        ):
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", args).fetchall())
            # (an index whose states match serves as a read of every finished job too: the
            # time must be its condition)
            assert "Index Cond: (COALESCE(((doc ->> 'updated_at'::text))::double precision" in plan, plan
            assert "dq_jobs_finished_updated" in plan, plan


def test_the_tables_let_go_of_the_rows_that_left_the_hot_set(pg_history: tuple[Queue, dict[str, Any]]) -> None:
    """A window open for weeks kept a row for every job it saw run; on PostgreSQL the hot
    set is the unfinished jobs and the newest finished ones, and the rest is paged."""
    queue, made = pg_history
    model = QueueModel(history=queue, page_size=1000)
    refresher = RefreshCoordinator(queue, [model])
    refresher.refresh()
    late = []
    for i in range(12):
        job_id = queue.submit("demo", {"prompt": f"late {i}"}, title=f"late {i}").job.id
        lease = queue.lease("w")
        assert lease is not None
        queue.complete(lease, {"text": "ok"})
        late.append(job_id)
    refresher.refresh()
    newest = [j["id"] for j in _finished_jobs(queue, made["finished"] + late)[:HOT]]
    everyone = made["finished"] + made["queued"] + made["running"] + late
    assert queue.hot_among(everyone) == set(newest) | set(made["queued"]) | set(made["running"])
    rows = model.hot_count()
    refresher.pace = Pace.HIDDEN
    assert refresher.release() == rows - (HOT + 3)
    assert model.hot_count() == HOT + 3
    _fetch_all(model)
    ids = _all_ids(model)
    assert len(ids) == len(everyone) and set(ids) == set(everyone)
