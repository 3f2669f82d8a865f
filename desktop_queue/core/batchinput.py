"""Reading a batch of job inputs: one prompt a line, a CSV file, or JSON Lines.

Both the New dialog's Batch tab and ``desktop-queue submit KIND --batch FILE`` read a
batch here, check every line (shape, the provider's ``validate``, the 1 MiB limit), and
hand the inputs to :meth:`Queue.submit_many` only when no line has a problem, so a
batch is created whole or not at all.

Formats:
    text: one prompt a line (blank lines skipped), put into the kind's prompt field
        (:attr:`InputSpec.prompt_field`) over the template's other values.
    csv: a header row naming fields, then one job a row; a cell is converted to its
        field's type (an empty cell keeps the template's value).
    jsonl: one whole input object a line (blank lines skipped); the template is not used.

Line numbers are the file's own (1 is the first line; a CSV's header is line 1).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from desktop_queue.core.errors import QueueError
from desktop_queue.core.fingerprint import canonical_json
from desktop_queue.core.inputspec import InputSpec, prompt_of, title_for, title_of
from desktop_queue.core.queue import MAX_BATCH, MAX_INPUT_BYTES


class BatchFormat(StrEnum):
    TEXT = "text"
    CSV = "csv"
    JSONL = "jsonl"


@dataclass(frozen=True)
class BatchItem:
    """One job of a batch.

    Attributes:
        line: the line of the file it came from.
        payload: the job's input.
        title: how it is listed (the start of its prompt), or None.
    """

    line: int
    payload: dict[str, Any]
    title: str | None


@dataclass(frozen=True)
class BatchProblem:
    """A line that cannot become a job: its number and why (no prompt text in it)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class BatchRead:
    """What a batch would create.

    Attributes:
        items: the jobs, in file order.
        problems: every line that cannot become a job; the batch is submitted only without any.
        repeats: items whose input equals an earlier item's (the queue returns the first one).
    """

    items: tuple[BatchItem, ...]
    problems: tuple[BatchProblem, ...]
    repeats: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.items) and not self.problems

    def summary(self) -> str:
        """ "10 jobs will be created", or why none will."""
        n = len(self.items)
        if self.problems:
            noun = "line has a problem" if len(self.problems) == 1 else "lines have problems"
            return f"{len(self.problems):,} {noun}: nothing will be created until they are fixed"
        if not n:
            return "No jobs yet: nothing to create"
        if n > MAX_BATCH:
            return f"{n:,} jobs: a batch holds at most {MAX_BATCH:,}"
        text = f"{n:,} job{'s' if n != 1 else ''} will be created"
        if self.repeats:
            same = "repeats an earlier one" if self.repeats == 1 else "repeat earlier ones"
            text += f" ({self.repeats:,} {same} and will not be created twice)"
        return text


def detect_format(name: str | None, text: str) -> BatchFormat:
    """The format by file extension (``.csv``, ``.jsonl``/``.ndjson``), else by content."""
    low = (name or "").lower()
    if low.endswith(".csv"):
        return BatchFormat.CSV
    if low.endswith((".jsonl", ".ndjson", ".jsonlines")):
        return BatchFormat.JSONL
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return BatchFormat.JSONL if first.startswith("{") else BatchFormat.TEXT


def _lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def read_batch(
    text: str,
    fmt: BatchFormat,
    spec: InputSpec | None,
    *,
    template: Mapping[str, Any] | None = None,
    validate: Callable[[Any], None] | None = None,
) -> BatchRead:
    """Reads a batch; every line is checked, nothing is submitted.

    Args:
        text: the file's (or the pasted) text.
        fmt: how to read it.
        spec: the kind's input description (None: JSON Lines, or CSV columns as input keys).
        template: the values of the other fields (text and CSV; default: the spec's defaults).
        validate: the provider's ``validate`` (raises :class:`QueueError` with the reason).
    """
    base = dict(template) if template is not None else (spec.defaults() if spec is not None else {})
    made: list[tuple[int, Any]] = []
    problems: list[BatchProblem] = []
    if fmt is BatchFormat.TEXT:
        if spec is None or spec.prompt_field is None:
            kind = spec.kind if spec is not None else "this kind"
            return BatchRead((), (BatchProblem(1, f"{kind} names no prompt field: give JSON Lines or CSV"),))
        for number, line in _lines(text):
            made.extend((number, p) for p in spec.build_all(spec.with_prompt(base, line.strip())))
    elif fmt is BatchFormat.JSONL:
        for number, line in _lines(text):
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(BatchProblem(number, f"not valid JSON: {exc.msg} (column {exc.colno})"))
                continue
            if not isinstance(value, dict):
                problems.append(BatchProblem(number, "not a JSON object: each line is one job's input"))
                continue
            made.append((number, value))
    else:
        _read_csv(text, spec, base, made, problems)
    items: list[BatchItem] = []
    seen: set[bytes] = set()
    repeats = 0
    for number, payload in made:
        problem = _check(payload, validate)
        if problem:
            problems.append(BatchProblem(number, problem))
            continue
        body = canonical_json(payload)
        if body in seen:
            repeats += 1
        seen.add(body)
        items.append(BatchItem(number, payload, title_for(spec, payload)))
    problems.sort(key=lambda p: p.line)
    return BatchRead(tuple(items), tuple(problems), repeats)


def _check(payload: Any, validate: Callable[[Any], None] | None) -> str | None:
    try:
        size = len(canonical_json(payload))
    except TypeError as exc:
        return f"not JSON: {exc}"
    if size > MAX_INPUT_BYTES:
        return f"the input is {size:,} bytes; the limit is {MAX_INPUT_BYTES:,} bytes (1 MiB)"
    if validate is not None:
        try:
            validate(payload)
        except QueueError as exc:
            return str(exc)
    return None


def _read_csv(
    text: str,
    spec: InputSpec | None,
    base: Mapping[str, Any],
    made: list[tuple[int, Any]],
    problems: list[BatchProblem],
) -> None:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        problems.append(BatchProblem(1, "the CSV file is empty: it needs a header row naming the fields"))
        return
    except csv.Error as exc:
        problems.append(BatchProblem(1, f"not valid CSV: {exc}"))
        return
    columns = [h.strip() for h in header]
    if spec is not None:
        unknown = [c for c in columns if c and not spec.has(c)]
        if unknown:
            names = ", ".join(f.name for f in spec.fields)
            problems.append(
                BatchProblem(1, "unknown column " + ", ".join(repr(c) for c in unknown) + f"; the fields are {names}")
            )
            return
    if len(set(columns)) != len(columns):
        problems.append(BatchProblem(1, "a column is named twice in the header"))
        return
    while True:
        number = reader.line_num + 1  # where the row starts (a quoted cell may span lines)
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            problems.append(BatchProblem(number, f"not valid CSV: {exc}"))
            break
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            problems.append(BatchProblem(number, f"{len(row)} cells where the header names {len(columns)}"))
            continue
        if spec is None:
            made.append((number, {**base, **{c: v for c, v in zip(columns, row, strict=True) if c and v != ""}}))
            continue
        values = dict(base)
        try:
            for column, cell in zip(columns, row, strict=True):
                if column and cell != "":
                    values[column] = spec.field(column).convert(cell)
        except ValueError as exc:
            problems.append(BatchProblem(number, str(exc)))
            continue
        made.extend((number, p) for p in spec.build_all(values))


__all__ = [
    "BatchFormat",
    "BatchItem",
    "BatchProblem",
    "BatchRead",
    "detect_format",
    "prompt_of",
    "read_batch",
    "title_of",
]
