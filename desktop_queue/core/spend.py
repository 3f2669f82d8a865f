"""What the Spend view shows: ledger totals by day, profile or model, and each budget's use.

Pure functions over :class:`~desktop_queue.core.ledger.SpendLedger` reports (the same
queries as ``desktop-queue spend``), so the window and the command line agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from desktop_queue.core.ledger import Budget, PriceTable, Spent, format_usd

#: the numbers a report row carries (summed into a total)
REPORT_NUMBERS = ("entries", "tokens_in", "tokens_out", "tokens", "images", "speech_chars", "speech_seconds", "usd")


def report_total(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of report rows (``unknown_cost`` if any row has it)."""
    total: dict[str, Any] = {k: sum(r.get(k, 0) for r in rows) for k in REPORT_NUMBERS}
    total["usd"] = round(total["usd"], 6)
    total["unknown_cost"] = any(r.get("unknown_cost") for r in rows)
    return total


def cost_text(usd: float, *, unknown: bool = False, estimate: bool = False) -> str:
    """``$0.42``, ``$0.42+`` (some cost unknown), ``~$0.42`` (an estimate)."""
    return ("~" if estimate else "") + format_usd(usd) + ("+" if unknown else "")


def is_estimate(prices: PriceTable, model: str, *, local: bool = False) -> bool:
    """True if the cost of ``model`` comes from a built-in estimate (no price of the user's own)."""
    if local or prices.user_price(model) is not None:
        return False
    price = prices.default_price(model)
    return price is not None and price.estimate


@dataclass(frozen=True)
class BudgetBar:
    """One budget limit and how much of it is used.

    Attributes:
        profile: the profile.
        period: ``day`` or ``month``.
        unit: ``usd`` or ``tokens``.
        used: spent so far.
        limit: the limit.
        text: ``$0.42 of $5.00 today``.
        unknown: some spend has no known price (``used`` is a lower bound).
    """

    profile: str
    period: str
    unit: str
    used: float
    limit: float
    text: str
    unknown: bool = False

    @property
    def share(self) -> float:
        """How full, 0..1 (1 when the limit is reached or passed)."""
        return 1.0 if self.limit <= 0 else min(1.0, self.used / self.limit)

    @property
    def reached(self) -> bool:
        return self.used >= self.limit


_WHEN = {"day": "today", "month": "this month"}


def budget_bars(profile: str, budget: Budget | None, today: Spent, month: Spent) -> list[BudgetBar]:
    """The bars of ``profile``'s budget: one per limit set, the day's first."""
    if budget is None or not budget.is_set():
        return []
    bars = []
    for period, spent in (("day", today), ("month", month)):
        usd_limit = budget.usd_per_day if period == "day" else budget.usd_per_month
        token_limit = budget.tokens_per_day if period == "day" else budget.tokens_per_month
        when = _WHEN[period]
        if usd_limit is not None:
            text = f"{cost_text(spent.usd, unknown=spent.unknown_cost)} of {format_usd(usd_limit)} {when}"
            bars.append(BudgetBar(profile, period, "usd", spent.usd, float(usd_limit), text, spent.unknown_cost))
        if token_limit is not None:
            text = f"{spent.tokens:,} of {int(token_limit):,} tokens {when}"
            bars.append(BudgetBar(profile, period, "tokens", float(spent.tokens), float(token_limit), text))
    return bars


__all__ = ["BudgetBar", "REPORT_NUMBERS", "budget_bars", "cost_text", "is_estimate", "report_total"]
