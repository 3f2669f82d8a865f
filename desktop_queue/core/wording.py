"""Counted nouns in what people read: "1 job", "7 jobs", never "job(s)".

A module of its own, importing nothing: the command line's parser, the store's notices
and the window all say counts, and none of them should load more to do it.
"""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for one: ``counted(1, "job")`` is ``"1 job"``,
    ``counted(1200, "answer")`` is ``"1,200 answers"`` (``plural`` where adding an s is wrong)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def were(n: int) -> str:
    """The verb agreeing with a count: ``"was"`` for one, else ``"were"``."""
    return "was" if n == 1 else "were"
