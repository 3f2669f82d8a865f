"""The command line: ``desktop-queue [--data-dir DIR] COMMAND ...`` (shared/DESIGN.md section 5).

A thin layer over :mod:`desktop_queue.core`. Exit codes: 0 done, 1 failed,
2 usage error (bad arguments or input), 3 no such job, 4 not allowed in the job's state.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

from desktop_queue import __version__
from desktop_queue.core import Job, Queue, QueueError, State, present
from desktop_queue.core.errors import InputTooLarge, InvalidInput
from desktop_queue.core.fileio import atomic_write
from desktop_queue.core.model import iso
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.core.queue import MAX_INPUT_BYTES
from desktop_queue.core.result_view import ResultContent, no_result_reason, read_result, show_text
from desktop_queue.core.retention import load_policy, save_policy

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_JOB, EXIT_NOT_ALLOWED = 0, 1, 2, 3, 4
PROG = "desktop-queue"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run AI generation jobs on this machine, and never lose one.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--data-dir",
        type=_data_dir_arg,
        help="data directory (default: $DESKTOP_QUEUE_DATA_DIR, then the user data dir)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    sub.add_parser("gui", help="open the window (the default)")

    p = sub.add_parser("submit", help="submit a job; prints it (with duplicate: true when it already existed)")
    p.add_argument("kind", help="job kind, e.g. demo")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--input", dest="input_json", metavar="JSON", help="the job's input as JSON")
    src.add_argument("--input-file", metavar="PATH", help="read the input JSON from a file")
    src.add_argument("stdin", nargs="?", choices=["-"], help="read the input JSON from standard input")
    p.add_argument("--key", help="idempotency key (default: a fingerprint of kind and input)")
    p.add_argument("--title", help="a title for people")
    p.add_argument("--priority", choices=["interactive", "background"], default="background")
    p.add_argument("--max-attempts", type=int, default=None, metavar="N")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("list", help="jobs, newest first")
    p.add_argument("--state", choices=[s.value for s in State])
    count = p.add_mutually_exclusive_group()
    count.add_argument(
        "--limit",
        type=_at_least_one,
        default=None,
        metavar="N",
        help=f"at most N jobs, the newest (default: {LIST_DEFAULT_LIMIT:,})",
    )
    count.add_argument("--all", action="store_true", help="every job, however many (a long history takes long)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("show", help="one job with its full event timeline (and its text result)")
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "result",
        help="a job's result: its text on standard output, or its artifact (image, audio) to a file",
        description="Writes a succeeded job's result: text (or JSON) to standard output or FILE; an "
        "artifact (an image, an audio file) only to FILE (without --output its path is printed). "
        "Exit codes: 3 no such job, 4 no result in the job's state, 1 the result is missing or damaged.",
    )
    p.add_argument("id")
    p.add_argument("-o", "--output", metavar="FILE", help="write the result to FILE ('-': standard output)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--json", action="store_true", help="print the whole result document as JSON")

    for name, text in (("cancel", "cancel a queued or running job"), ("retry", "retry a dead or cancelled job")):
        p = sub.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("replay", help="a new job from a finished one, with the same or edited input")
    p.add_argument("id")
    p.add_argument("--input", dest="input_json", metavar="JSON", help="edited input (default: the original's)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("work", help="run a headless worker on the same lease engine")
    p.add_argument("--concurrency", type=_at_least_one, default=4, metavar="N")
    p.add_argument("--until-idle", action="store_true", help="exit when nothing is queued or running")
    p.add_argument(
        "--rpm",
        type=_positive,
        default=None,
        metavar="N",
        help="requests per minute to the OpenAI-compatible endpoint (default: unlimited)",
    )
    p.add_argument(
        "--tpm",
        type=_positive,
        default=None,
        metavar="N",
        help="tokens per minute to the OpenAI-compatible endpoint (default: unlimited)",
    )
    p.add_argument(
        "--provider-concurrency",
        type=_at_least_one,
        default=None,
        metavar="N",
        help="attempts at once against the OpenAI-compatible endpoint (default: --concurrency)",
    )
    p.add_argument("--model", default=None, help="default model of openai.chat / openai.responses jobs")
    for unit, kind, text in (("usd", _positive, "dollars"), ("tokens", _at_least_one, "tokens (in and out)")):
        for period in ("day", "month"):
            p.add_argument(
                f"--budget-{unit}-per-{period}",
                type=kind,
                default=None,
                metavar="N",
                help=f"{text} the profile may spend a {period}, shared by every process on the "
                "data dir (jobs wait when the next would pass it; default: no budget)",
            )
    p.add_argument(
        "--lease-s",
        type=_positive,
        default=None,
        metavar="S",
        help="lease length (default: each kind's own, 30 s); the worker renews its leases "
        "every third of it for as long as it runs",
    )
    p.add_argument(
        "--attempt-timeout",
        type=_positive,
        default=None,
        metavar="S",
        help="give up on an attempt that has not answered after S seconds, as a retryable "
        "timeout (default: each kind's own; a job's input may set its own timeout_s)",
    )
    p.add_argument("--max-seconds", type=_positive, default=None, metavar="S", help="exit after S seconds")
    p.add_argument("--json", action="store_true", help="print a JSON summary")

    p = sub.add_parser("stats", help="counts per state, wait and run time percentiles, retries, dead letters")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "purge",
        help="remove finished jobs (with their results and artifacts) finished before a date",
        description="Removes finished jobs for good: their timelines, results and artifact files. "
        "With --by-retention, applies the data directory's retention policy (see `retention`).",
    )
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--finished-before",
        type=_time_arg,
        metavar="WHEN",
        help="a local date (YYYY-MM-DD), an ISO 8601 time, or an age such as 90d, 12h",
    )
    when.add_argument("--by-retention", action="store_true", help="apply the saved retention policy")
    p.add_argument(
        "--state", action="append", choices=["succeeded", "dead", "cancelled"], help="only these (repeatable)"
    )
    p.add_argument("--dry-run", action="store_true", help="say how many would go; remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("retention", help="show or set how long finished jobs and damaged files are kept")
    # (absent unless given: "never" is a value, None)
    p.add_argument(
        "--finished-days",
        type=_days_arg,
        default=argparse.SUPPRESS,
        metavar="N|never",
        help="keep finished jobs N days",
    )
    keep = p.add_mutually_exclusive_group()
    keep.add_argument("--keep-succeeded", action="store_true", default=None, help="never purge succeeded jobs")
    keep.add_argument("--no-keep-succeeded", dest="keep_succeeded", action="store_false")
    p.add_argument(
        "--quarantine-days",
        type=_days_arg,
        default=argparse.SUPPRESS,
        metavar="N|never",
        help="keep *.corrupt-* files N days",
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("spend", help="what the providers' calls used and cost, from the spend ledger")
    p.add_argument("--by", choices=["day", "model", "profile"], default="day", help="group by (default: day)")
    p.add_argument("--since", type=_day_arg, default=None, metavar="YYYY-MM-DD", help="from this local day on")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser


#: how many jobs `list` prints unless told: a year of history is a million jobs
LIST_DEFAULT_LIMIT = 1000

# Numbers are checked where they are parsed: a negative --limit would slice off the
# oldest job, a negative --max-seconds would still lease (the first check runs after
# the driver starts), and float() takes "nan" and "inf", which no comparison refuses.


def _time_arg(text: str) -> float:
    """A wall time from a local date, an ISO 8601 time, or an age (``90d``, ``12h``, ``30m``) back from now."""
    text = text.strip()
    units = {"d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
    if text[-1:] in units and text[:-1].isdigit():
        return time.time() - int(text[:-1]) * units[text[-1]]
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date, time or age: {text!r} (e.g. 2026-01-31, 90d)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a local date or time, as people mean it
    return moment.timestamp()


def _days_arg(text: str) -> int | None:
    if text.strip().lower() in ("never", "forever", "none"):
        return None
    return _at_least_one(text)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def _data_dir_arg(text: str) -> str:
    # an empty value would quietly fall back to $DESKTOP_QUEUE_DATA_DIR or the user's own data
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, not an empty string")
    return text


def _day_arg(text: str) -> str:
    from datetime import date

    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a day (YYYY-MM-DD): {text!r}") from None


# ---------------------------------------------------------------------- output


def _out(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: {message}\n")


def _ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    delta = now - ts
    future = delta < 0
    delta = abs(delta)
    if delta < 1:
        text = "now"
        return text
    if delta < 60:
        text = f"{delta:.0f}s"
    elif delta < 3600:
        text = f"{delta / 60:.0f}m"
    elif delta < 86400:
        text = f"{delta / 3600:.1f}h"
    else:
        text = f"{delta / 86400:.1f}d"
    return f"in {text}" if future else f"{text} ago"


def describe_state(job: Job, now: float) -> str:
    """The state as people read it, in the window's words (:mod:`desktop_queue.core.present`):
    ``retrying in 12 s (backoff)`` for a queued job that waits, ``dead (fatal)`` for a dead letter."""
    if job.state == State.QUEUED and job.run_after > now + 0.5:
        return present.describe_state(job.to_json(with_events=False, with_input=False), now)
    if job.state == State.DEAD and job.last_error:
        return f"dead ({job.last_error.get('class')})"
    return job.state


def _print_job_line(job: Job, now: float) -> None:
    title = job.title if len(job.title) <= 40 else job.title[:39] + "…"
    print(
        f"{job.id}  {describe_state(job, now):<26} {job.kind:<12} {job.attempts}/{job.max_attempts}  "
        f"{_ago(job.created_at, now):>9}  {title}"
    )


def _print_job(
    job: Job, now: float, timeline: bool = True, artifact: Path | None = None, result_problem: str | None = None
) -> None:
    print(f"job       {job.id}  {job.title}")
    print(f"state     {describe_state(job, now)}")
    print(f"kind      {job.kind}  priority {job.priority}")
    print(f"attempts  {job.attempts}/{job.max_attempts} this run (run {job.run}), {job.total_attempts} in all")
    print(f"key       {job.idempotency_key} ({job.key_source})")
    print(f"created   {iso(job.created_at)}")
    if job.last_error:
        status = f" HTTP {job.last_error['status']}" if job.last_error.get("status") else ""
        print(f"error     {job.last_error.get('class')}{status}: {job.last_error.get('message')}")
    if job.result_ref:
        print(f"result    {result_problem}" if result_problem else f"result    {job.result_ref}")
    if artifact is not None:
        print(f"artifact  {artifact}")
    if job.provider_job_id:
        print(f"provider  {job.provider_job_id}")
    if job.replay_of:
        print(f"replay of {job.replay_of}")
    if job.replayed_as:
        print(f"replayed  as {', '.join(job.replayed_as)}")
    if not timeline:
        return
    print("timeline")
    for ev in job.events:
        who = f" {ev.worker}" if ev.worker else ""
        detail = "  ".join(f"{k}={v}" for k, v in ev.detail.items())
        print(
            f"  {iso(ev.at)}  {ev.type:<16} attempt {ev.attempt} epoch {ev.epoch:<4} by {ev.actor}{who}  {detail}".rstrip()
        )


def _job_json(job: Job, **extra: Any) -> dict[str, Any]:
    return {**job.to_json(), **extra}


# ---------------------------------------------------------------------- input


def _parse_json(text: str | bytes, where: str) -> Any:
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_INPUT_BYTES:
        raise InputTooLarge(f"input is {size:,} bytes; the limit is {MAX_INPUT_BYTES:,} bytes (1 MiB)")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not valid JSON: {exc}") from None


def _read_limited(stream: Any, where: str) -> bytes:
    data = stream.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputTooLarge(f"{where} is over the limit of {MAX_INPUT_BYTES:,} bytes (1 MiB)")
    return data if isinstance(data, bytes) else data.encode()


def _submit_input(args: argparse.Namespace) -> Any:
    if args.input_json is not None:
        return _parse_json(args.input_json, "--input")
    if args.input_file is not None:
        try:
            with open(args.input_file, "rb") as fh:
                return _parse_json(_read_limited(fh, args.input_file), args.input_file)
        except OSError as exc:
            raise InvalidInput(f"cannot read {args.input_file}: {exc.strerror or exc}") from None
    if args.stdin == "-":
        return _parse_json(_read_limited(sys.stdin.buffer, "standard input"), "standard input")
    raise InvalidInput("give the input with --input JSON, --input-file PATH or - (standard input)")


# ---------------------------------------------------------------------- commands


def _open(args: argparse.Namespace, providers: dict[str, Any] | None = None) -> Queue:
    if providers is None:
        from desktop_queue.providers import discover

        providers = dict(discover())
    queue = Queue.open(resolve_data_dir(args.data_dir), providers)
    for notice in queue.report.notices:
        _err(f"note: {notice}")
    for item in queue.reconciled:
        _err(f"note: interrupted job {item.job_id} ({item.title}): {item.decision}, {item.reason}")
    return queue


def cmd_submit(args: argparse.Namespace) -> int:
    payload = _submit_input(args)
    with _open(args) as queue:
        result = queue.submit(
            args.kind,
            payload,
            key=args.key,
            title=args.title,
            priority=args.priority,
            max_attempts=args.max_attempts,
            actor="cli",
        )
        if args.json:
            extra: dict[str, Any] = {"duplicate": result.duplicate}
            if result.result is not None:
                extra["result"] = result.result.get("result")
            _out(_job_json(result.job, **extra))
        elif result.duplicate:
            print(f"duplicate: job {result.job.id} already has this input ({result.job.state}); nothing new was queued")
        else:
            print(f"submitted {result.job.id}  {result.job.title}  ({result.job.priority})")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    limit = None if args.all else args.limit or LIST_DEFAULT_LIMIT
    with _open(args) as queue:
        jobs = queue.list(args.state, limit=limit)
        if args.limit is None and not args.all and len(jobs) == limit:
            counts = queue.counts()
            total = counts.get(args.state, 0) if args.state else sum(counts.values())
            if total > limit:
                _err(f"note: the newest {limit:,} of {total:,} jobs; --limit N or --all for more")
        if args.json:
            _out([j.to_json(with_events=False, with_input=False) for j in jobs])
            return EXIT_OK
        now = time.time()
        if not jobs:
            print("no jobs" + (f" in state {args.state}" if args.state else ""))
        for job in jobs:
            _print_job_line(job, now)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """Prints one job; says so (on stderr too) when its result file is missing or was damaged.

    That still exits 0: the job was shown, and what is wrong is in the output
    (``result_problem`` with ``--json``), where a script looks for the result anyway.
    """
    with _open(args) as queue:
        job = queue.get(args.id)
        problem = None
        if job.result_ref:
            # the ref names a file: write it now if only the journal holds the result yet
            queue.results.materialize(job.idempotency_key)
            problem = queue.results.problem(job.idempotency_key)
        if args.json:
            data = _job_json(job)
            if job.result_ref:
                stored = queue.results.get(job.idempotency_key)
                data["result"] = stored.get("result") if stored else None
                data["result_problem"] = problem.to_json() if problem is not None else None
                artifact = queue.results.artifact_path(job.idempotency_key)
                if artifact is not None:
                    data["artifact_path"] = str(artifact)
            _out(data)
        else:
            artifact = queue.results.artifact_path(job.idempotency_key) if job.result_ref else None
            _print_job(job, time.time(), artifact=artifact, result_problem=problem.message if problem else None)
            if job.result_ref and problem is None:
                _print_text_result(job, read_result(queue.results, job))
        if problem is not None:
            _err(f"job {job.id}: {problem.message}")
    return EXIT_OK


def _print_text_result(job: Job, content: ResultContent) -> None:
    """The text (or JSON) result under ``show``'s timeline, cut with a note when long."""
    if content.text is None:
        return
    shown, cut = show_text(content.text)
    print(f"result ({content.message})")
    for line in shown.splitlines() or [""]:
        print(f"  {line}")
    if cut:
        print(
            f"  … ({len(content.text) - len(shown):,} more characters: "
            f"desktop-queue result {job.id} prints all of it, --output FILE writes it)"
        )


def cmd_result(args: argparse.Namespace) -> int:
    """Writes a job's result: text to stdout (or ``--output``), an artifact only to ``--output``."""
    with _open(args) as queue:
        job = queue.get(args.id)
        if job.state != State.SUCCEEDED or not job.result_ref:
            _err(f"job {job.id} has no result: {no_result_reason(job)}")
            return EXIT_NOT_ALLOWED
        content = read_result(queue.results, job)
        if args.json:
            doc = queue.results.get(job.idempotency_key)
            if doc is None:
                _err(f"job {job.id}: {content.message}")
                return EXIT_FAILED
            out = dict(doc)
            if content.path is not None:
                out["artifact_path"] = str(content.path)
            _out(out)
            return EXIT_OK
    if not content.has_result:
        _err(f"job {job.id}: {content.message}")
        return EXIT_FAILED
    if content.is_artifact:
        assert content.path is not None
        if not args.output:
            print(content.path)
            _err(
                f"note: job {job.id}'s result is {content.message}; "
                f"the path above is its file: use --output FILE to write a copy"
            )
            return EXIT_OK
        return _write_output(args.output, content.path.read_bytes(), force=args.force)
    assert content.text is not None
    data = content.text.encode() + (b"" if content.text.endswith("\n") else b"\n")
    if not args.output or args.output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return EXIT_OK
    return _write_output(args.output, data, force=args.force)


def _write_output(target: str, data: bytes, *, force: bool) -> int:
    """Writes ``data`` to ``target`` atomically; never replaces a file unless ``force``."""
    if target == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return EXIT_OK
    path = Path(target)
    if path.is_dir():
        _err(f"{target} is a directory; give a file name")
        return EXIT_USAGE
    try:
        if not atomic_write(path, data, overwrite=force):
            _err(f"{target} exists; nothing was written (--force replaces it)")
            return EXIT_FAILED
    except OSError as exc:
        _err(f"cannot write {target}: {exc.strerror or exc}")
        return EXIT_FAILED
    _err(f"wrote {len(data):,} bytes to {target}")
    return EXIT_OK


def cmd_verb(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        if args.command == "cancel":
            job = queue.cancel(args.id, "cli")
            text = f"cancelled {job.id}"
        elif args.command == "retry":
            job = queue.retry(args.id, "cli")
            text = f"queued {job.id} again (run {job.run}, fresh budget of {job.max_attempts} attempts)"
        else:
            payload = _parse_json(args.input_json, "--input") if args.input_json is not None else None
            job = queue.replay(args.id, payload, "cli")
            text = f"replayed {job.replay_of} as new job {job.id}"
        if args.json:
            _out(_job_json(job))
        else:
            print(text)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        stats = queue.stats()
    if args.json:
        _out(stats.to_json())
        return EXIT_OK

    def sec(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}s"

    print("jobs      " + "  ".join(f"{k} {v}" for k, v in stats.counts.items()) + f"  (total {stats.jobs})")
    print(f"wait      p50 {sec(stats.wait_p50_s)}  p95 {sec(stats.wait_p95_s)}")
    print(f"run       p50 {sec(stats.run_p50_s)}  p95 {sec(stats.run_p95_s)}")
    print(
        f"attempts  {stats.attempts}  retries {stats.retries}  throttled {stats.throttled}  "
        f"lease expiries {stats.lease_expiries}  reconciled {stats.reconciled}  dead letters {stats.dead_letters}"
    )
    return EXIT_OK


def cmd_spend(args: argparse.Namespace) -> int:
    from desktop_queue.core.ledger import PriceTable, SpendLedger, format_usd

    # only reads: stored entries carry their cost, so prices.json is not even opened
    ledger = SpendLedger(resolve_data_dir(args.data_dir), prices=PriceTable())
    rows = ledger.report(args.by, since=args.since)
    numbers = ("entries", "tokens_in", "tokens_out", "tokens", "images", "speech_chars", "speech_seconds", "usd")
    total: dict[str, Any] = {k: sum(r[k] for r in rows) for k in numbers}
    total["usd"] = round(total["usd"], 6)
    total["unknown_cost"] = any(r["unknown_cost"] for r in rows)
    damaged = ledger.damaged_lines()
    if damaged:
        _err(f"note: {damaged} damaged or torn ledger line(s) were skipped")
    if args.json:
        _out({"by": args.by, "since": args.since, "rows": rows, "total": total})
        return EXIT_OK
    if not rows:
        print("nothing spent" + (f" since {args.since}" if args.since else ""))
        return EXIT_OK

    def cost(row: dict[str, Any]) -> str:
        return format_usd(row["usd"]) + ("+" if row["unknown_cost"] else "")

    width = max(len(args.by), 5, *(len(str(r[args.by])) for r in rows))
    print(
        f"{args.by:<{width}}  {'calls':>6}  {'tokens in':>12}  {'tokens out':>12}  {'images':>6}  "
        f"{'speech chars':>12}  {'cost':>10}"
    )
    for row in [*rows, {args.by: "total", **total}]:
        print(
            f"{row[args.by]:<{width}}  {row['entries']:>6,}  {row['tokens_in']:>12,}  {row['tokens_out']:>12,}  "
            f"{row['images']:>6,}  {row['speech_chars']:>12,}  {cost(row):>10}"
        )
    if total["unknown_cost"]:
        print("+ some calls used a model with no known price: their cost is not included (set one in Preferences)")
    print("costs are estimates unless you set your own prices")
    return EXIT_OK


def cmd_work(args: argparse.Namespace) -> int:
    # every number was checked by the parser (_at_least_one, _positive)
    budgets = {
        name: getattr(args, name)
        for name in ("budget_usd_per_day", "budget_usd_per_month", "budget_tokens_per_day", "budget_tokens_per_month")
    }
    from PySide6.QtCore import QCoreApplication, QTimer

    from desktop_queue.providers.setup import ProfileConfig, build
    from desktop_queue.runtime import LeaseDriver

    # the endpoint comes from OPENAI_BASE_URL, the key from the keyring or OPENAI_API_KEY
    config = ProfileConfig(
        rpm=args.rpm,
        tpm=args.tpm,
        concurrency=args.provider_concurrency,
        **({"model": args.model} if args.model else {}),
        **budgets,
    )
    providers, flow = build([config], data_dir=resolve_data_dir(args.data_dir))
    # after everything that can refuse the arguments: a process has one application object
    app = QCoreApplication.instance() or QCoreApplication([PROG])
    queue = _open(args, dict(providers))
    try:
        purged, files = queue.apply_retention()  # a no-op unless a policy was set (see `retention`)
        if purged or files:
            _err(f"note: retention removed {purged} finished jobs and {files} damaged files")
    except QueueError as exc:
        _err(f"note: retention not applied: {exc}")
    driver = LeaseDriver(
        queue,
        queue.providers,
        concurrency=args.concurrency,
        flow=flow,
        lease_s=args.lease_s,
        attempt_timeout_s=args.attempt_timeout,
    )
    # what this worker's attempts ended in: a job queued again (retry, throttle, given
    # back) is not finished, and is counted apart
    finished: dict[str, int] = {}
    requeued = {"n": 0}

    def count(_id: str, state: str) -> None:
        if state in ("succeeded", "dead", "cancelled"):
            finished[state] = finished.get(state, 0) + 1
        elif state:
            requeued["n"] += 1

    driver.job_finished.connect(count)
    stop = {"why": ""}
    started = time.monotonic()

    def on_error(message: str) -> None:
        _err(message)
        if queue.store.poisoned:
            # the store takes no more changes until reopened: stop, so that a restart
            # (which checks what is on disk) can take over, instead of failing every tick
            request_stop("the store hit a disk error")

    def request_stop(why: str) -> None:
        if not stop["why"]:
            stop["why"] = why
            app.quit()

    def check() -> None:
        if args.max_seconds is not None and time.monotonic() - started >= args.max_seconds:
            request_stop("time limit reached")
        elif args.until_idle and driver.running == 0 and queue.is_idle():
            request_stop("idle")

    driver.error.connect(on_error)
    # --until-idle stops the moment the driver says it is idle, not at the next look
    driver.idle.connect(check)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: request_stop("interrupted"))
    watch = QTimer()
    watch.setInterval(100)
    watch.timeout.connect(check)
    watch.start()
    if not args.json:
        _err(f"working on {resolve_data_dir(args.data_dir)} with {args.concurrency} slot(s) as {driver.worker_id}")
    driver.start()
    app.exec()
    watch.stop()
    clean = driver.shutdown(timeout_ms=10_000)
    counts = queue.counts()
    try:
        queue.close()
    except QueueError as exc:  # the last sync failed: say so, the exit code tells scripts
        _err(str(exc))
        stop["why"] = stop["why"] or "the store hit a disk error"
    summary = {
        "stopped": stop["why"],
        "finished": finished,
        "requeued": requeued["n"],
        "counts": counts,
        "clean_shutdown": clean,
    }
    if args.json:
        _out(summary)
    else:
        done = ", ".join(f"{v} {k}" for k, v in sorted(finished.items())) or "nothing finished"
        again = f" ({requeued['n']} attempt(s) queued again)" if requeued["n"] else ""
        _err(
            f"stopped ({stop['why']}): {done}{again}; queue now "
            + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        )
    if stop["why"] == "the store hit a disk error":
        return EXIT_FAILED
    return EXIT_OK if stop["why"] != "interrupted" else 130


def cmd_purge(args: argparse.Namespace) -> int:
    with _open(args) as queue:
        if args.by_retention:
            policy = load_policy(queue.data_dir)
            jobs, files = queue.apply_retention(policy, dry_run=args.dry_run)
            data = {"policy": policy.to_json(), "jobs": jobs, "quarantined_files": files, "dry_run": args.dry_run}
            text = f"{policy.describe()}: {jobs} jobs and {files} damaged files"
        else:
            jobs = queue.purge(args.finished_before, args.state, dry_run=args.dry_run)
            before = datetime.datetime.fromtimestamp(args.finished_before).astimezone().isoformat(timespec="seconds")
            data = {"before": before, "states": args.state or ["succeeded", "dead", "cancelled"], "jobs": jobs}
            data["dry_run"] = args.dry_run
            text = f"{jobs} jobs finished before {before}"
    if args.json:
        _out(data)
    else:
        print(("would remove " if args.dry_run else "removed ") + text)
    return EXIT_OK


def cmd_retention(args: argparse.Namespace) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    policy = load_policy(data_dir)
    changes: dict[str, Any] = {}
    for name in ("finished_days", "quarantine_days"):
        if name in vars(args):
            changes[name] = getattr(args, name)
    if args.keep_succeeded is not None:
        changes["keep_succeeded"] = args.keep_succeeded
    if changes:
        policy = dataclasses.replace(policy, **changes)
        save_policy(data_dir, policy)
    if args.json:
        _out(policy.to_json())
    else:
        print(policy.describe())
    return EXIT_OK


def cmd_gui(args: argparse.Namespace) -> int:
    from desktop_queue.app import main as app_main

    return app_main(args.data_dir)


COMMANDS = {
    "gui": cmd_gui,
    "submit": cmd_submit,
    "list": cmd_list,
    "show": cmd_show,
    "result": cmd_result,
    "cancel": cmd_verb,
    "retry": cmd_verb,
    "replay": cmd_verb,
    "work": cmd_work,
    "stats": cmd_stats,
    "spend": cmd_spend,
    "purge": cmd_purge,
    "retention": cmd_retention,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    command = args.command or "gui"
    if command == "gui" and not hasattr(args, "json"):
        args.json = False
    try:
        return COMMANDS[command](args)
    except QueueError as exc:
        _err(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
