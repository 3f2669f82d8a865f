"""``desktop-queue migrate --from A --to B``: copy a whole queue between a data dir and PostgreSQL.

Either side is a data dir or a ``postgresql://`` URI (:mod:`desktop_queue.core.migrate`
does the work). The copy goes in batches, each one commit; an interrupted run is
finished with ``--resume``, which copies only what the target lacks. At the end both
sides are counted and checksummed, and the command fails (exit 1) if they differ.

Hooked into :mod:`desktop_queue.cli` by :func:`add_parser` and :func:`run`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.paths import data_dir as resolve_data_dir
from desktop_queue.core.wording import counted, were

# desktop_queue.core.migrate imports the queue, its store and the archive: `run` loads it,
# so that every other command's parser (which adds `migrate`) starts without them
if TYPE_CHECKING:
    from desktop_queue.core.migrate import Report, Summary

EXIT_OK = 0
EXIT_FAILED = 1
#: jobs a batch (one commit) holds by default: desktop_queue.core.migrate.BATCH (a test keeps
#: them equal), spelled here so that the parser does not import the migration
BATCH = 500

#: seconds between two progress lines on stderr
PROGRESS_EVERY_S = 1.0


def add_parser(sub: Any) -> None:
    """Adds ``migrate`` to the CLI's subparsers."""
    p = sub.add_parser(
        "migrate",
        help="copy every job (events, results) between a data dir and PostgreSQL, then verify both sides",
        description="Copies a queue: jobs with their timelines and results, in batches (one commit each). "
        "Either side is a data dir or a postgresql://... URI. Stop the window and workers first. "
        "Schedules, prices and the spend ledger are files of the data dir: copied when the target is a "
        "data dir, left where they are when it is PostgreSQL.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="DIR|URI", help="where the jobs are now")
    p.add_argument("--to", dest="target", required=True, metavar="DIR|URI", help="where to copy them (empty)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="the target holds an interrupted migration: copy what it lacks, duplicate nothing",
    )
    p.add_argument("--batch", type=_batch, default=BATCH, metavar="N", help=f"jobs per commit (default {BATCH})")
    p.add_argument("--json", action="store_true", help="print JSON")


def _batch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"between 1 and 100000, not {value}")
    return value


class _Progress:
    """Progress lines on stderr, at most one a second (and the last one)."""

    def __init__(self) -> None:
        self._last = 0.0
        self._started = time.monotonic()

    def __call__(self, copied: int, skipped: int, total: int) -> None:
        now = time.monotonic()
        done = copied + skipped
        if now - self._last < PROGRESS_EVERY_S and done < total:
            return
        self._last = now
        extra = f" ({skipped:,} there already)" if skipped else ""
        then = ", verifying both sides" if done >= total else ""
        sys.stderr.write(f"migrate: copied {copied:,} of {total:,} jobs{extra}, {now - self._started:.1f} s{then}\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    """Runs ``migrate``; 0 when both sides verify equal, 1 when they differ or the copy failed."""
    from desktop_queue.core.migrate import copy_data_files, data_files_note, describe, is_pg, migrate, open_side

    if getattr(args, "store", None):
        raise InvalidInput("migrate names its stores with --from and --to, not --store")
    source_loc, target_loc = args.source.strip(), args.target.strip()
    if not is_pg(source_loc) and not is_pg(target_loc):
        if Path(source_loc).resolve() == Path(target_loc).resolve():
            raise InvalidInput("--from and --to are the same data dir")
    elif source_loc == target_loc:
        raise InvalidInput("--from and --to are the same store")
    if not is_pg(source_loc) and not (Path(source_loc) / "store").is_dir():
        raise InvalidInput(f"--from {source_loc}: not a data dir (it has no store/ folder)")
    local = resolve_data_dir(args.data_dir)
    source = open_side(source_loc, data_dir=local)
    try:
        target = open_side(target_loc, data_dir=local)
        try:
            report = migrate(source, target, resume=args.resume, batch=args.batch, progress=_Progress())
        finally:
            target.close()
    finally:
        source.close()
    source_dir = local if is_pg(source_loc) else Path(source_loc)
    if is_pg(target_loc):
        report.notes.append(data_files_note(target_loc, source_dir))
    else:
        report.notes.extend(copy_data_files(source_dir, Path(target_loc)))
    if report.running:
        report.notes.append(
            f"{counted(report.running, 'job')} {were(report.running)} running in the source, copied as running; the "
            f"target's first opener reconciles {'it' if report.running == 1 else 'them'} "
            "(stop the source's workers before migrating)"
        )
    _print(report, describe(source_loc), describe(target_loc), args.json)
    if not report.equal:
        sys.stderr.write("desktop-queue: the target does not hold what the source holds (see the checksums)\n")
        return EXIT_FAILED
    return EXIT_OK


def _side(name: str, where: str, summary: Summary | None) -> list[str]:
    if summary is None:
        return [f"{name}: {where}: not read"]
    counts = ", ".join(f"{state} {n:,}" for state, n in sorted(summary.counts.items())) or "no jobs"
    return [f"{name}: {where}", f"  {counted(summary.jobs, 'job')}: {counts}", f"  checksum {summary.checksum}"]


def _print(report: Report, source: str, target: str, as_json: bool) -> None:
    if as_json:
        doc = {
            "from": source,
            "to": target,
            "copied": report.copied,
            "skipped": report.skipped,
            "equal": report.equal,
            "source": report.source.to_json() if report.source else None,
            "target": report.target.to_json() if report.target else None,
            "notes": report.notes,
        }
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    lines = [
        f"copied {counted(report.copied, 'job')}"
        + (f" ({report.skipped:,} were there already)" if report.skipped else "")
    ]
    lines += _side("from", source, report.source)
    lines += _side("to", target, report.target)
    lines.append("verified: both sides hold the same jobs" if report.equal else "MISMATCH: the sides differ")
    lines += [f"note: {n}" for n in report.notes]
    print("\n".join(lines))
