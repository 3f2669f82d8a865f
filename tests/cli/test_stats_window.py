"""``desktop-queue stats --window``: the Metrics pane's figures on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_queue.core import Queue
from desktop_queue.core.outcome import Outcome

from .conftest import Cli


def _history(data_dir: Path) -> None:
    """Two successes, one fatal dead letter, one job still queued (the real clock: the last hour)."""
    with Queue.open(data_dir) as queue:
        for i in range(4):
            queue.submit("demo", {"i": i}, max_attempts=1)
        for _ in range(2):
            lease = queue.lease()
            assert lease is not None
            queue.complete(lease, {"text": "ok"})
        lease = queue.lease()
        assert lease is not None
        queue.fail(lease, Outcome(ok=False, error_class="fatal", message="bad request"))  # type: ignore[arg-type]


def test_window_json_reports_the_figures(dq: Cli, data_dir: Path) -> None:
    _history(data_dir)
    run = dq.run("stats", "--json", "--window", "1h")
    assert run.code == 0, run.err
    doc = run.json()
    assert doc["window"] == "1h" and doc["step_s"] == 60 and len(doc["times"]) == 60
    assert doc["totals"]["finished"] == {"succeeded": 2, "dead": 1, "cancelled": 0}
    assert doc["totals"]["success_rate"] == pytest.approx(2 / 3, abs=1e-6)
    assert doc["totals"]["depth_now"] == {"queued": 1, "running": 0, "dead": 1}
    assert doc["dead_letters_by_class"] == {"fatal": 1}
    assert doc["empty"] is False
    assert any(p["profile"] == "openai" for p in doc["profiles"])  # the default profile, from flow control
    week = dq.run("stats", "--json", "--window", "7d").json()
    assert week["step_s"] == 3600 and len(week["times"]) == 168
    assert week["totals"]["finished"] == doc["totals"]["finished"]


def test_window_text_and_plain_stats_unchanged(dq: Cli, data_dir: Path) -> None:
    _history(data_dir)
    text = dq.run("stats", "--window", "24h")
    assert text.code == 0, text.err
    assert "finished  succeeded 2  dead 1  cancelled 0" in text.out
    assert "dead      fatal 1" in text.out
    plain = dq.run("stats", "--json")
    assert plain.code == 0
    assert "window" not in plain.json() and plain.json()["counts"]["succeeded"] == 2


def test_window_in_a_real_process_on_an_empty_store(dq: Cli) -> None:
    run = dq.sub("stats", "--json", "--window", "24h")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["empty"] is True and doc["events"] == 0


def test_bad_window_is_a_usage_error(dq: Cli) -> None:
    run = dq.run("stats", "--window", "2h")
    assert run.code == 2
    assert "invalid choice: '2h'" in run.err


def test_metrics_follow_other_processes(dq: Cli, data_dir: Path) -> None:
    """Jobs submitted and cancelled by other processes are folded in incrementally here, and a
    fresh process (``stats --window``) derives the same figures from the store alone."""
    from desktop_queue.core.windowed import WindowedMetrics

    with Queue.open(data_dir) as queue:
        metrics = WindowedMetrics(queue)
        assert metrics.figures("1h").empty
        first = dq.sub("submit", "demo", "--input", '{"prompt": "one"}', "--json").json()
        assert dq.sub("submit", "demo", "--input", '{"prompt": "two"}').code == 0
        assert dq.sub("cancel", first["id"]).code == 0
        here = metrics.figures("1h")
        assert metrics.rebuilds == 1  # (folded from the changes, not rebuilt)
        assert here.totals["depth_now"] == {"queued": 1, "running": 0, "dead": 0}
        assert here.totals["finished"]["cancelled"] == 1
        there = dq.sub("stats", "--json", "--window", "1h").json()
        assert there["totals"]["depth_now"] == here.totals["depth_now"]
        assert there["finished"] == here.finished and there["depth"] == here.depth


def test_large_counts_read_with_thousands_separators(dq: Cli, data_dir: Path) -> None:
    """At a million jobs `stats` read "succeeded 941000  dead 50000  (total 1001000)"."""
    with Queue.open(data_dir) as queue:
        queue.submit_many("demo", [{"i": i} for i in range(1001)])
        while (lease := queue.lease()) is not None:
            queue.complete(lease, {"text": "ok"})
    plain = dq.run("stats")
    assert plain.code == 0, plain.err
    assert "succeeded 1,001" in plain.out and "(total 1,001)" in plain.out
    assert "attempts  1,001  " in plain.out
    window = dq.run("stats", "--window", "1h")
    assert window.code == 0, window.err
    assert "finished  succeeded 1,001  dead 0" in window.out
    assert "events)" in window.out and "(3,003 events)" in window.out
