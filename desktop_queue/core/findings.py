"""What start-up reconciliation found, kept where every process on the data dir can read it.

Only the first process to open a store reconciles what a dead one left ``running``
(:mod:`desktop_queue.core.reconcile`); when that is a CLI command or a ``work`` worker,
the window opened afterwards never saw it. So each decision is also written to
``<data dir>/reconciled.jsonl`` (one JSON line per job: a sequence number, the time,
the job id, the decision, the reason and the process that decided), appended durably
by the reconciling process while it is still the store's only opener (so no two
processes append at once).

The window remembers in ``reconciled-seen.json`` the last sequence number it showed,
and shows what came after (:meth:`FindingsLog.unseen`): the business rule of *what
the user has not been told yet* lives here, the window only displays it. Titles are not
written here (they may come from a prompt); the window reads them from the store.
The file keeps the newest :data:`KEEP` findings.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from desktop_queue.core.store.fileio import atomic_write, fsync_dir, make_dirs

log = logging.getLogger(__name__)

LOG_NAME = "reconciled.jsonl"
SEEN_NAME = "reconciled-seen.json"
#: the findings kept (older ones are dropped when the file is rewritten)
KEEP = 1000
#: rewrite (and trim) the file when it holds this many more than KEEP
SLACK = 200


@dataclass(frozen=True)
class Finding:
    """One reconciliation decision, as every process can read it back.

    Attributes:
        seq: increasing over the data dir's life.
        at: when it was decided (wall time).
        job_id: the job.
        decision: ``succeeded`` | ``requeued`` | ``resumed`` | ``dead`` | ``unchanged``.
        reason: why (no prompt or key text: the reconciler's own words).
        pid: the process that decided.
        host: the machine it ran on.
    """

    seq: int
    at: float
    job_id: str
    decision: str
    reason: str
    pid: int
    host: str

    @classmethod
    def from_json(cls, raw: dict) -> Finding:
        return cls(
            seq=int(raw["seq"]),
            at=float(raw["at"]),
            job_id=str(raw["job_id"]),
            decision=str(raw["decision"]),
            reason=str(raw.get("reason", "")),
            pid=int(raw.get("pid", 0)),
            host=str(raw.get("host", "")),
        )


class FindingsLog:
    """``reconciled.jsonl`` and the window's ``reconciled-seen.json`` in one data dir.

    Args:
        data_dir: the data directory.
    """

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOG_NAME
        self.seen_path = self.data_dir / SEEN_NAME

    def read(self) -> list[Finding]:
        """Every finding kept, oldest first (a damaged line is skipped, never fatal)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                out.append(Finding.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                log.warning("skipped a damaged line of %s", self.path)  # (a torn last append after a crash)
        return out

    def record(self, decisions: Iterable[tuple[str, str, str]], at: float) -> list[Finding]:
        """Appends ``(job_id, decision, reason)`` decisions durably; the findings written.

        Called by the reconciling process while it is the store's only opener.
        """
        decisions = list(decisions)
        if not decisions:
            return []
        # (a queue on PostgreSQL keeps nothing else here: its data dir may not exist yet)
        make_dirs(self.data_dir)
        kept = self.read()
        seq = kept[-1].seq if kept else 0
        pid, host = os.getpid(), socket.gethostname()
        new = [Finding(seq + i, at, job_id, d, reason, pid, host) for i, (job_id, d, reason) in enumerate(decisions, 1)]
        lines = "".join(json.dumps(asdict(f), sort_keys=True) + "\n" for f in new)
        if len(kept) + len(new) > KEEP + SLACK:  # trim: rewrite the newest KEEP atomically
            everything = [*kept, *new][-KEEP:]
            data = "".join(json.dumps(asdict(f), sort_keys=True) + "\n" for f in everything)
            atomic_write(self.path, data.encode("utf-8"))
            return new
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, lines.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.data_dir)
        return new

    def seen(self) -> int:
        """The last sequence number the window has shown (0: none)."""
        try:
            return int(json.loads(self.seen_path.read_text(encoding="utf-8"))["seq"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return 0

    def unseen(self) -> list[Finding]:
        """The findings the window has not shown yet, oldest first.

        A log that restarted its numbering (deleted, or trimmed past the mark) shows
        what it holds that is newer than the mark's time.
        """
        mark = self.seen()
        found = self.read()
        if found and found[-1].seq < mark:  # the log was deleted and begun again
            return found
        return [f for f in found if f.seq > mark]

    def mark_seen(self, findings: Iterable[Finding]) -> None:
        """Remembers that these findings were shown (the highest sequence number)."""
        seqs = [f.seq for f in findings]
        if seqs and max(seqs) > self.seen():
            atomic_write(self.seen_path, json.dumps({"seq": max(seqs)}).encode("utf-8"))


def describe(findings: list[Finding], titles: dict[str, str], own_pid: int, now: float) -> list[str]:
    """The window's banner lines for findings: a summary, then up to five jobs.

    Args:
        findings: what to tell (oldest first).
        titles: job id -> title (from the store; a purged job has none).
        own_pid: this process (its own findings need no "by another process").
        now: for the time of day of another process's findings.
    """
    from desktop_queue.core.present import clock_time, reconciliation_summary

    if not findings:
        return []
    summary = reconciliation_summary([f.decision for f in findings])
    others = sorted({(f.pid, f.host) for f in findings if f.pid != own_pid})
    if others:
        when = clock_time(max(f.at for f in findings if f.pid != own_pid), now)
        who = "another process" if len(others) == 1 else f"{len(others)} other processes"
        summary += f" (found by {who} at {when}, before this window opened)"
    lines = [summary + "."]
    for finding in findings[:5]:
        title = titles.get(finding.job_id)
        name = f"{title} (job {finding.job_id})" if title else f"job {finding.job_id}"
        lines.append(f"• {name}: {finding.reason}")
    if len(findings) > 5:
        lines.append(f"• … and {len(findings) - 5} more (see each job's timeline)")
    return lines
