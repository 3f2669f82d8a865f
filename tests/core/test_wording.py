"""Counted nouns read as sentences: what the banner, the tray and the command line say."""

from __future__ import annotations

from desktop_queue.core.wording import counted, sentence, were


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "job") == "1 job"
    assert counted(0, "job") == "0 jobs"
    assert counted(1200, "rate-limit (429) answer") == "1,200 rate-limit (429) answers"
    assert counted(2, "entry", "entries") == "2 entries" and counted(1, "entry", "entries") == "1 entry"
    assert (were(1), were(0), were(3)) == ("was", "were", "were")


def test_a_sentence_ends_once() -> None:
    """The replay preview said "… Call `/v1/models` to view available models for your key.." ."""
    assert sentence("the request was refused") == "The request was refused."
    assert sentence("… models for your key.") == "… models for your key."
    assert sentence("is it down?") == "Is it down?" and sentence("wait…") == "Wait…"
    assert sentence("  ") == ""
