"""Finding jobs: the text of a job's prompt, and a search query over the fields people filter by.

A query is what a person types in a pane's search box: free words plus optional
``field:value`` terms, e.g. ``kind:openai.chat state:dead after:2026-11-01 refund``.
The same :class:`SearchQuery` filters the hot jobs in memory (:meth:`SearchQuery.matches`)
and the archive through its index (:meth:`desktop_queue.core.store.archive.Archive.rows`).
The prompt is searched too: the user's own data, on their own machine, in the window's
own views; it never reaches an event or a log.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from desktop_queue.core.errors import InvalidInput

#: how much of a prompt the archive's index keeps for search (a 1 MiB prompt is found by
#: its first pages; the whole text stays in the job itself)
PROMPT_INDEX_CHARS = 4096

#: input fields that hold what a person wrote, by kind of provider
_TEXT_FIELDS = ("prompt", "system", "text", "input", "instructions")

#: the ``field:value`` terms a query understands
FIELDS = ("kind", "profile", "state", "after", "before", "id")


def escape_like(text: str) -> str:
    """``text`` as a literal in a SQL ``LIKE`` pattern whose escape character is ``\\``
    (SQLite's ``ESCAPE '\\'``, PostgreSQL's default): its ``%`` and ``_`` match themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def prompt_text(payload: Any, limit: int = PROMPT_INDEX_CHARS) -> str:
    """The text a person wrote in an input (prompt, system prompt, speech text, messages).

    Parts are joined by newlines; at most ``limit`` characters.
    """
    if not isinstance(payload, Mapping):
        return ""
    parts: list[str] = []
    for name in _TEXT_FIELDS:
        value = payload.get(name)
        if isinstance(value, str) and value:
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(_message_texts(value))
    messages = payload.get("messages")
    if isinstance(messages, list):
        parts.extend(_message_texts(messages))
    return "\n".join(parts)[:limit]


def _message_texts(items: list[Any]) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Mapping):
            content = item.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(str(c["text"]) for c in content if isinstance(c, Mapping) and isinstance(c.get("text"), str))
    return out


def profile_of(job: Mapping[str, Any]) -> str | None:
    """The provider profile a job runs on: its ``profile`` field, else its input's, else its kind's prefix."""
    value = job.get("profile")
    if isinstance(value, str):
        return value
    inp = job.get("input")
    if isinstance(inp, Mapping) and isinstance(inp.get("profile"), str):
        return str(inp["profile"])
    kind = job.get("kind")
    return str(kind).split(".", 1)[0] if isinstance(kind, str) and "." in kind else None


def _day(value: str, field: str) -> float:
    """A local date (YYYY-MM-DD) or ISO 8601 time as a wall time."""
    try:
        when = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{field}: expected a date such as 2026-11-30, not {value!r}") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return when.timestamp()


@dataclass(frozen=True)
class SearchQuery:
    """What to find. Every part is optional; all given parts must match.

    Attributes:
        text: words that must appear (as one phrase, any case) in the id, title, kind,
            state, error or prompt.
        kind: the job kind, exactly.
        profile: the provider profile, exactly.
        state: the job state.
        after: created at or after this wall time.
        before: created before this wall time.
    """

    text: str | None = None
    kind: str | None = None
    profile: str | None = None
    state: str | None = None
    after: float | None = None
    before: float | None = None

    @classmethod
    def parse(cls, typed: str) -> SearchQuery:
        """A query from a search box: ``field:value`` terms (see :data:`FIELDS`) and free words.

        An unknown ``word:thing`` is searched as text (an error message has colons).
        ``before:`` takes a day and means "before the end of that day".

        Raises:
            InvalidInput: a date that cannot be read.
        """
        words: list[str] = []
        found: dict[str, Any] = {}
        for token in typed.split():
            name, sep, value = token.partition(":")
            name = name.casefold()
            if sep and value and name in FIELDS:
                if name == "after":
                    found["after"] = _day(value, "after")
                elif name == "before":
                    end = _day(value, "before")
                    found["before"] = end + 86_400.0 if len(value) == 10 else end
                elif name == "id":
                    words.append(value)
                else:
                    found[name] = value.casefold() if name == "state" else value
            else:
                words.append(token)
        text = " ".join(words).strip()
        return cls(text=text or None, **found)

    @property
    def empty(self) -> bool:
        return not any((self.text, self.kind, self.profile, self.state, self.after, self.before))

    def with_state(self, state: str | None) -> SearchQuery:
        """The same query in another state (the pane's state filter wins over a typed ``state:``)."""
        return replace(self, state=state) if state is not None else self

    def matches_fields(self, job: Mapping[str, Any]) -> bool:
        """Whether the job's kind, profile, state and creation time fit (the text aside)."""
        if self.kind is not None and job.get("kind") != self.kind:
            return False
        if self.state is not None and job.get("state") != self.state:
            return False
        if self.profile is not None and profile_of(job) != self.profile:
            return False
        created = job.get("created_at")
        if self.after is not None and (created is None or created < self.after):
            return False
        return not (self.before is not None and (created is None or created >= self.before))

    def matches(self, job: Mapping[str, Any], searchable: str | None = None) -> bool:
        """Whether a job dict matches: its fields, and the text in ``searchable`` (casefolded
        id, title, kind, state, error) or in its prompt (when the dict has its input)."""
        if not self.matches_fields(job):
            return False
        if not self.text:
            return True
        needle = self.text.casefold()
        if searchable is None:
            searchable = " ".join(str(job.get(k) or "") for k in ("id", "title", "kind", "state")).casefold()
        return needle in searchable or needle in prompt_text(job.get("input")).casefold()
