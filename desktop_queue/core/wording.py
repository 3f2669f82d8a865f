"""Counted nouns in what people read: "1 job", "7 jobs", never "job(s)"; sentences that end once.

A module of its own, importing nothing: the command line's parser, the store's notices
and the window all say counts, and none of them should load more to do it.
"""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for one: ``counted(1, "job")`` is ``"1 job"``,
    ``counted(1200, "answer")`` is ``"1,200 answers"`` (``plural`` where adding an s is wrong)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def first_of(items: list[str], most: int, sep: str = ", ") -> str:
    """The first ``most`` of ``items`` joined by ``sep``, and how many more there are:
    ``"a, b (and 3 more)"``."""
    more = len(items) - most
    return sep.join(items[:most]) + (f" (and {more:,} more)" if more > 0 else "")


def were(n: int) -> str:
    """The verb agreeing with a count: ``"was"`` for one, else ``"were"``."""
    return "was" if n == 1 else "were"


def status_words(status: object, message: str) -> str:
    """`` HTTP 400`` to put before ``message``, or "" when it has no status or names it already
    (a provider's "openai.chat: HTTP 400: …" said twice pushed its own words out of sight)."""
    return f" HTTP {status}" if status and f"HTTP {status}" not in message else ""


def sentence(text: str) -> str:
    """``text`` as a sentence: a capital first letter, and one full stop at the end.

    A provider's message often ends in its own ("… for your key."): adding another
    made "key..".
    """
    text = text.strip()
    if not text:
        return text
    text = text[:1].upper() + text[1:]
    return text if text[-1] in ".!?…" else text + "."
