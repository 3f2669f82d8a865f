"""The backlog case of ``store.py``: one ``work`` process against several on one data dir.

Issue 10's last "done when" line: four ``work`` processes on one data dir finish a
backlog at least 2.5 times faster than one. The backlog is ``jobs`` demo jobs that each
take ``job_ms`` (a stand-in for a provider's answer: the attempt waits, as it waits on
the network), submitted beforehand to a fresh data dir per run. Then either one
``python -m desktop_queue --data-dir D work --concurrency T --until-idle`` runs them all,
or ``procs`` such commands, started together, share them. The time is the span from the
first start to the last exit, start-up, open and the closing compaction included; the
CPU is that of the commands and their children. Runs alternate (1, N, 1, N, ...), each
pair in fresh data dirs; the medians are shown.

The reference is one process of ours, measured in the same run. On instant jobs the same
comparison measures the store's commit path instead (the ``concurrency`` case).

This module is loaded by ``store.py`` (``backlog_module()``), which it uses for its helpers.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: the goal: N processes finish the backlog at least this many times faster than one
GOAL_SCALING = 2.5


def _store() -> Any:
    """``store.py``, for its helpers (it registers itself under this name before importing us)."""
    import store

    return store


def _run_group(argvs: list[list[str]], env: dict[str, str]) -> tuple[float, float, list[str]]:
    """Starts every command at once and waits for all: (wall seconds, CPU seconds, failures)."""
    store = _store()
    cpu_before = store._children_cpu()
    start = time.perf_counter()
    procs = [
        subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) for argv in argvs
    ]
    failures = []
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"exit {proc.returncode}: {err[-2000:]}")
    wall = time.perf_counter() - start
    return wall, store._children_cpu() - cpu_before, failures


def bench_backlog(*, jobs: int, job_ms: int, procs: int, threads: int, rounds: int, root: Path) -> dict[str, Any]:
    """Runs the case; returns the figures of 1 and of ``procs`` processes (see the module docstring).

    Raises:
        RuntimeError: a command failed, or some job did not succeed.
    """
    store = _store()
    env = store._child_env()
    store._compile_bytecode()
    shapes = (1, procs)
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in shapes}
    for index in range(rounds):
        for n in shapes:
            data_dir = root / f"backlog-{n}-{index}"
            store.log(
                f"  backlog round {index + 1}/{rounds}: {n} work process(es): submitting {jobs:,} jobs of {job_ms} ms"
            )
            store.spawn(
                {
                    "phase": "prepare_jobs",
                    "backend": "ours",
                    "dir": str(data_dir),
                    "n": jobs,
                    "duration_s": job_ms / 1000,
                }
            )
            if hasattr(os, "sync"):
                os.sync()
            argv = [sys.executable, "-m", "desktop_queue", "--data-dir", str(data_dir), "work",
                    "--concurrency", str(threads), "--until-idle"]  # fmt: skip
            wall, cpu, failures = _run_group([argv] * n, env)
            if failures:
                raise RuntimeError(f"backlog: {len(failures)} of {n} work processes failed:\n" + "\n".join(failures))
            counts = store.stats_counts(data_dir)
            if counts.get("succeeded", 0) != jobs:
                raise RuntimeError(f"backlog with {n} process(es): not every job succeeded: {counts}")
            runs[n].append({"wall_s": wall, "cpu_s": cpu})
            store.log(f"    {wall:.2f} s wall, {cpu / jobs * 1e3:.3f} ms CPU per job")
            shutil.rmtree(data_dir, ignore_errors=True)
    figures: dict[str, Any] = {"jobs": jobs, "job_ms": job_ms, "threads": threads, "procs": procs, "rounds": rounds}
    for n, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        figures[str(n)] = {
            "wall_s": wall,
            "jobs_per_s": jobs / wall,
            "cpu_ms": statistics.median(r["cpu_s"] for r in rs) / jobs * 1e3,
            "rounds": rs,
        }
    return figures


def format_notes(backlog: dict[str, Any] | None) -> list[str]:
    """The case's lines of the report."""
    if not backlog:
        return []
    lines = [
        f"== backlog: {backlog['jobs']:,} pre-submitted demo jobs of {backlog['job_ms']} ms each, "
        f"work --concurrency {backlog['threads']} --until-idle, median of {backlog['rounds']} round(s), "
        "first start to last exit =="
    ]
    for n in (1, backlog["procs"]):
        fig = backlog[str(n)]
        lines.append(
            f"  {n} work process(es){'':<12} {fig['wall_s']:6.2f} s wall, {fig['jobs_per_s']:7,.0f} jobs/s, "
            f"{fig['cpu_ms']:.3f} ms CPU per job (rounds: "
            + ", ".join(f"{r['wall_s']:.2f}" for r in fig["rounds"])
            + ")"
        )
    lines.append("")
    return lines


def summary_rows(backlog: dict[str, Any] | None) -> list[tuple[str, str, str, bool, float, str, float]]:
    """The case's rows of the summary table: N processes against one (the peer)."""
    if not backlog:
        return []
    n = backlog["procs"]
    many, one = backlog[str(n)], backlog["1"]
    case = f"backlog {backlog['jobs']:,} x {backlog['job_ms']} ms"
    peer = "1 work process (ours)"
    return [
        (case, f"wall time, {n} work processes", "s", False, many["wall_s"], peer, one["wall_s"]),
        (case, f"CPU, {n} work processes", "ms/job", False, many["cpu_ms"], peer, one["cpu_ms"]),
    ]


def evaluate_goals(backlog: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The case's goal: N processes finish the backlog ``GOAL_SCALING`` times faster than one."""
    if not backlog:
        return []
    n = backlog["procs"]
    many, one = backlog[str(n)], backlog["1"]
    ratio = one["wall_s"] / many["wall_s"]
    return [
        {
            "goal": f"{n} work processes finish a backlog >= {GOAL_SCALING}x faster than 1",
            "status": "PASS" if ratio >= GOAL_SCALING else "MISS",
            "detail": f"{many['wall_s']:.2f} s vs {one['wall_s']:.2f} s for {backlog['jobs']:,} jobs of "
            f"{backlog['job_ms']} ms = {ratio:.2f}x",
            "value": ratio,
        }
    ]
