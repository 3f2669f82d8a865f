"""``desktop-queue alerts`` and ``alerts rules``; ``work`` runs the upkeep and logs notices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_queue.core.alerts import THROTTLE_SPIKE, AlertBook, Rule, Signals
from desktop_queue.core.outbox import Outbox

from .conftest import Cli

OK, FAILED, USAGE = 0, 1, 2
T0 = 1_800_000_000.0


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config"
    monkeypatch.setenv("DESKTOP_QUEUE_CONFIG_DIR", str(path))
    return path


def _record(data_dir: Path) -> None:
    rule = Rule(THROTTLE_SPIKE, threshold=10, clear_s=0)
    book = AlertBook(data_dir)
    spike = Signals(at=T0, throttles=tuple(T0 - 1 for _ in range(12)))
    book.update([rule], spike)
    book.update([rule], Signals(at=T0 + 60))
    book.update([rule], Signals(at=T0 + 120, throttles=tuple(T0 + 119 for _ in range(15))))


def test_no_alerts_yet(dq: Cli) -> None:
    run = dq.run("alerts")
    assert run.code == OK and "no active alerts" in run.out
    assert dq.run("alerts", "--json").json() == {"active": [], "history": []}


def test_alerts_lists_the_active_ones_and_the_history_newest_first(dq: Cli) -> None:
    _record(dq.data_dir)
    doc = dq.run("alerts", "--json").json()
    assert [(t["rule"], t["kind"]) for t in doc["active"]] == [(THROTTLE_SPIKE, "fired")]
    assert [t["kind"] for t in doc["history"]] == ["fired", "cleared", "fired"]
    assert doc["history"][0]["at"] == T0 + 120
    text = dq.run("alerts")
    assert text.code == OK
    assert text.out.index("active:") < text.out.index("history")
    assert "15 rate-limit (429) answers in" in text.out
    assert len(dq.run("alerts", "--json", "--limit", "1").json()["history"]) == 1


def test_a_torn_history_line_is_a_note_not_a_failure(dq: Cli) -> None:
    _record(dq.data_dir)
    with open(AlertBook(dq.data_dir).history_path, "ab") as f:
        f.write(b'{"id": 9, "ru')
    run = dq.run("alerts", "--json")
    assert run.code == OK and len(run.json()["history"]) == 3
    assert "torn" in run.err


def test_rules_are_shown_changed_and_reset(dq: Cli, config_dir: Path) -> None:
    shown = dq.run("alerts", "rules", "--json").json()
    assert {r["name"] for r in shown["rules"]} >= {THROTTLE_SPIKE, "breaker_open", "budget_nearly_spent"}
    changed = dq.run(
        "alerts",
        "rules",
        "--set",
        f"{THROTTLE_SPIKE}.threshold=25",
        "--set",
        "breaker_open.for_s=600",
        "--disable",
        "budget_nearly_spent",
    )
    assert changed.code == OK, changed.err
    assert "saved to" in changed.err
    assert f"{THROTTLE_SPIKE:<22} threshold=25" in changed.out and "(changed)" in changed.out
    saved = json.loads((config_dir / "alerts.json").read_text())
    assert saved["rules"] == {
        THROTTLE_SPIKE: {"threshold": 25.0},
        "breaker_open": {"for_s": 600.0},
        "budget_nearly_spent": {"enabled": False},
    }
    rules = {r["name"]: r for r in dq.run("alerts", "rules", "--json").json()["rules"]}
    assert rules[THROTTLE_SPIKE]["threshold"] == 25 and rules["budget_nearly_spent"]["enabled"] is False
    dq.run("alerts", "rules", "--reset", THROTTLE_SPIKE, "--enable", "budget_nearly_spent")
    rules = {r["name"]: r for r in dq.run("alerts", "rules", "--json").json()["rules"]}
    assert rules[THROTTLE_SPIKE]["threshold"] == 10 and rules["budget_nearly_spent"]["enabled"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "nope.threshold=1"], "no alert rule 'nope'"),
        (["--set", "throttle_spike.threshold=lots"], "must be a number"),
        (["--set", "throttle_spike=3"], "NAME.FIELD=VALUE"),
        (["--set", "throttle_spike.colour=3"], "has no setting 'colour'"),
        (["--disable", "nope"], "no alert rule 'nope'"),
    ],
)
def test_bad_rule_settings_exit_2_with_one_line_and_change_nothing(
    dq: Cli, config_dir: Path, args: list[str], message: str
) -> None:
    run = dq.run("alerts", "rules", *args)
    assert run.code == USAGE
    assert len(run.err_lines) == 1 and message in run.err
    assert not (config_dir / "alerts.json").exists()


def test_a_bad_limit_is_a_usage_error(dq: Cli) -> None:
    run = dq.run("alerts", "--limit", "-1")
    assert run.code == USAGE and "must be zero or more" in run.err


def test_work_announces_what_it_finished_once(dq: Cli, config_dir: Path) -> None:
    job = dq.submit({"prompt": "a haiku", "duration_s": 0.01}, "--title", "haiku")
    run = dq.sub("work", "--until-idle", "--max-seconds", "30", env={"DESKTOP_QUEUE_CONFIG_DIR": str(config_dir)})
    assert run.code == OK, run.err
    assert f"notice: job {job['id']} (demo): finished" in run.err
    assert "haiku" not in run.err  # a title may be a prompt's first line: never logged
    outbox = Outbox(dq.data_dir, lambda: T0)
    assert outbox.view().delivered(f"{job['id']}:1:succeeded")
    again = dq.sub("work", "--until-idle", "--max-seconds", "30", env={"DESKTOP_QUEUE_CONFIG_DIR": str(config_dir)})
    assert again.code == OK and "notice:" not in again.err


def test_work_leaves_the_notices_to_an_open_window(dq: Cli, config_dir: Path) -> None:
    window = Outbox(dq.data_dir, lambda: T0)
    window.hold_window()  # as an open window does
    try:
        job = dq.submit({"prompt": "a haiku", "duration_s": 0.01})
        env = {"DESKTOP_QUEUE_CONFIG_DIR": str(config_dir)}
        run = dq.sub("work", "--until-idle", "--max-seconds", "30", env=env)
        assert run.code == OK, run.err
        assert "notice:" not in run.err
        assert [n.job_id for n in window.view().pending()] == [job["id"]]  # the window shows it
    finally:
        window.release_window()
