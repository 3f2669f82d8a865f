"""``desktop-queue spend`` reports the spend ledger; ``work --budget-*`` sets the profile's budgets."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.ledger import Budget, SpendLedger, Usage

from .conftest import Cli


def local_ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M").timestamp()


@pytest.fixture
def spent(data_dir: Path) -> SpendLedger:
    """A ledger with two days, three models and two profiles (one of them on a local server)."""
    ledger = SpendLedger(data_dir)
    day1, day2 = local_ts("2031-05-01 09:00"), local_ts("2031-05-02 18:30")
    chat = Usage(tokens_in=1_000_000, tokens_out=500_000)  # gpt-4o-mini: $0.15 + $0.30
    ledger.record(profile="openai", model="gpt-4o-mini", kind="openai.chat", usage=chat, job_id="a", attempt=1, at=day1)
    ledger.record(
        profile="openai", model="dall-e-3", kind="openai.image", usage=Usage(images=2), job_id="b", attempt=1, at=day1
    )
    ledger.record(profile="openai", model="gpt-4o-mini", kind="openai.chat", usage=chat, job_id="c", attempt=2, at=day2)
    ledger.record(
        profile="local",
        model="llama3",
        kind="openai.chat",
        usage=Usage(tokens_in=700, tokens_out=300),
        job_id="d",
        attempt=1,
        at=day2,
        local=True,
    )
    return ledger


def test_spend_by_day_is_a_readable_table(dq: Cli, spent: SpendLedger) -> None:
    run = dq.run("spend")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].split() == ["day", "calls", "tokens", "in", "tokens", "out", "images", "speech", "chars", "cost"]
    assert lines[1].split() == ["2031-05-01", "2", "1,000,000", "500,000", "2", "0", "$0.53"]
    assert lines[2].split() == ["2031-05-02", "2", "1,000,700", "500,300", "0", "0", "$0.45"]
    assert lines[3].split() == ["total", "4", "2,000,700", "1,000,300", "2", "0", "$0.98"]
    assert "estimates" in run.out


def test_spend_json_by_model_and_profile_since_a_day(dq: Cli, spent: SpendLedger) -> None:
    run = dq.run("spend", "--json", "--by", "model")
    assert run.code == 0, run.err
    doc = run.json()
    assert doc["by"] == "model" and doc["since"] is None
    rows = {row["model"]: row for row in doc["rows"]}
    assert set(rows) == {"dall-e-3", "gpt-4o-mini", "llama3"}
    assert rows["gpt-4o-mini"]["tokens"] == 3_000_000 and rows["gpt-4o-mini"]["usd"] == pytest.approx(0.90)
    assert rows["dall-e-3"]["images"] == 2 and rows["dall-e-3"]["usd"] == pytest.approx(0.08)
    assert rows["llama3"]["usd"] == 0.0  # a local server costs nothing
    assert doc["total"]["usd"] == pytest.approx(0.98) and doc["total"]["entries"] == 4

    run = dq.run("spend", "--json", "--by", "profile", "--since", "2031-05-02")
    assert run.code == 0, run.err
    rows = {row["profile"]: row for row in run.json()["rows"]}
    assert rows["openai"]["entries"] == 1 and rows["local"]["tokens"] == 1000
    assert run.json()["since"] == "2031-05-02"


def test_spend_in_a_real_process_and_with_nothing_recorded(
    dq: Cli, spent: SpendLedger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = dq.sub("spend", "--by", "profile")
    assert run.code == 0, run.err
    assert [line.split()[0] for line in run.out.splitlines()[1:4]] == ["local", "openai", "total"]
    empty = Cli(tmp_path / "elsewhere", capsys).run("spend")
    assert empty.code == 0 and empty.out.strip() == "nothing spent"
    assert not (tmp_path / "elsewhere").exists()  # a report creates nothing


def test_unknown_costs_are_flagged_not_hidden(dq: Cli, spent: SpendLedger) -> None:
    spent.record(
        profile="openai",
        model="mystery-model",
        kind="openai.chat",
        usage=Usage(tokens_in=10),
        job_id="e",
        attempt=1,
        at=local_ts("2031-05-02 19:00"),
    )
    run = dq.run("spend")
    assert run.code == 0, run.err
    assert "$0.45+" in run.out and "no known price" in run.out
    assert dq.run("spend", "--json").json()["total"]["unknown_cost"] is True


@pytest.mark.parametrize("bad", [["--by", "week"], ["--since", "yesterday"], ["--since", "2031-02-30"]])
def test_spend_usage_errors(dq: Cli, bad: list[str]) -> None:
    run = dq.run("spend", *bad)
    assert run.code == 2
    assert "usage:" in run.err


def test_work_passes_its_budget_flags_into_the_profile(dq: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from desktop_queue.providers import setup

    seen: list[Any] = []

    def capture(profiles: Any, *args: Any, **kwargs: Any) -> Any:
        seen.extend(profiles)
        raise InvalidInput("stopped by the test")  # before any worker starts

    monkeypatch.setattr(setup, "build", capture)
    run = dq.run(
        "work",
        "--budget-usd-per-day",
        "5",
        "--budget-usd-per-month",
        "50.5",
        "--budget-tokens-per-day",
        "10000",
        "--budget-tokens-per-month",
        "200000",
    )
    assert run.code == 2 and "stopped by the test" in run.err
    assert seen[0].budget() == Budget(
        usd_per_day=5.0, usd_per_month=50.5, tokens_per_day=10_000, tokens_per_month=200_000
    )


@pytest.mark.parametrize("flag", ["--budget-usd-per-day", "--budget-tokens-per-month"])
def test_work_refuses_a_budget_that_is_not_positive(dq: Cli, flag: str) -> None:
    run = dq.run("work", flag, "0")
    assert run.code == 2
    assert flag in run.err_lines[-1] and "error:" in run.err_lines[-1]
