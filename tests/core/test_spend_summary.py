"""core.spend: what the Spend view shows, from ledger reports (the same queries as `desktop-queue spend`)."""

from __future__ import annotations

from pathlib import Path

from desktop_queue.core import FakeClock
from desktop_queue.core.ledger import Budget, Price, PriceTable, SpendLedger, Spent, Usage
from desktop_queue.core.spend import budget_bars, cost_text, is_estimate, report_total


def test_budget_bars_one_per_limit_the_day_first() -> None:
    budget = Budget(usd_per_day=5.0, usd_per_month=50.0, tokens_per_month=1000)
    bars = budget_bars("openai", budget, Spent(tokens=200, usd=0.42), Spent(tokens=1200, usd=60.0, unknown_cost=True))
    assert [b.text for b in bars] == [
        "$0.42 of $5.00 today",
        "$60.00+ of $50.00 this month",
        "1,200 of 1,000 tokens this month",
    ]
    assert bars[0].share == 0.42 / 5.0 and not bars[0].reached
    assert bars[1].share == 1.0 and bars[1].reached and bars[1].unknown
    assert budget_bars("openai", None, Spent(), Spent()) == []
    assert budget_bars("openai", Budget(), Spent(), Spent()) == []


def test_costs_are_marked_as_estimates_where_they_are(tmp_path: Path) -> None:
    prices = PriceTable.load(tmp_path)
    assert is_estimate(prices, "gpt-4o-mini")
    assert not is_estimate(prices, "gpt-4o-mini", local=True)
    assert not is_estimate(prices, "no-such-model")
    prices.set_price("gpt-4o-mini", Price(input_per_1m=1.0, output_per_1m=1.0))
    assert not is_estimate(prices, "gpt-4o-mini")
    assert cost_text(0.42, estimate=True) == "~$0.42" and cost_text(1.0, unknown=True) == "$1.00+"


def test_report_totals_match_the_ledger(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)
    ledger = SpendLedger(tmp_path, clock, prices=PriceTable())
    for n, (profile, model) in enumerate([("openai", "gpt-4o-mini"), ("openai", "gpt-4o"), ("ollama", "llama3.2")]):
        ledger.record(
            profile=profile,
            model=model,
            kind="openai.chat",
            usage=Usage(tokens_in=100, tokens_out=50),
            job_id=f"j{n}",
            attempt=1,
            usd=0.01 * (n + 1),
        )
    rows = ledger.report("profile")
    assert [r["profile"] for r in rows] == ["ollama", "openai"]
    total = report_total(rows)
    assert total["entries"] == 3 and total["tokens"] == 450 and round(total["usd"], 6) == 0.06
