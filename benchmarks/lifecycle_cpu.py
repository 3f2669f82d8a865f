"""What a job's life costs besides the disk: the lifecycle with every sync turned off.

``benchmarks/store.py`` measures durable lifecycles (submit, lease, complete) against
huey's SQLite storage. A durable lifecycle costs ours two syncs (submit and success; the
lease is synced before a provider call, which this lifecycle has none of) and huey three
(one per SQLite commit). With S the cost of one sync and C the CPU of the rest:

    (3 S + C_huey) / (2 S + C_ours) >= 1.5   <=>   C_ours <= C_huey / 1.5

whatever S is. This script measures both C in the same run: the same lifecycles as
``store.py``, with ``fdatasync``/``fsync`` made no-ops here and huey opened with
``fsync=False``. Each figure is the best of several rounds on a fresh store, with
rotation and compaction out of the way (they are measured by ``store.py``).

Usage: ``.venv/bin/python benchmarks/lifecycle_cpu.py [--rounds N] [--ops N]``
(needs the ``bench`` extra for huey).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import HueySubject, OursSubject, fsync_suspended, payload_for, result_for  # noqa: E402


def _best(lifecycle: Callable[[int], None], rounds: int, ops: int) -> float:
    """Microseconds per lifecycle: the best round of ``ops`` after a warm-up."""
    for i in range(200):
        lifecycle(-1 - i)
    best = float("inf")
    for r in range(rounds):
        start = time.perf_counter()
        for i in range(ops):
            lifecycle(r * ops + i)
        best = min(best, (time.perf_counter() - start) / ops * 1e6)
    return best


def measure_ours(root: Path, rounds: int, ops: int) -> float:
    """Desktop Queue through the public API, syncs turned off in this process.

    Segments never rotate here, so no compaction runs meanwhile (``store.py`` counts it).
    """
    subject = OursSubject(root / "ours", rotate_bytes=1 << 30)
    with fsync_suspended():
        subject.open()
        try:
            return _best(lambda i: subject.lifecycle(payload_for("cpu", i), result_for(i)), rounds, ops)
        finally:
            subject.close()


def measure_huey(root: Path, rounds: int, ops: int) -> float:
    """huey's ``SqliteHuey(fsync=False)``: enqueue, dequeue, put_result."""
    subject = HueySubject(root / "huey", fsync=False)
    subject.open()
    try:
        return _best(lambda i: subject.lifecycle(payload_for("cpu", i), result_for(i)), rounds, ops)
    finally:
        subject.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per store (default 7)")
    parser.add_argument("--ops", type=int, default=1000, help="lifecycles per round (default 1000)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        huey = measure_huey(root, args.rounds, args.ops)
        ours = measure_ours(root, args.rounds, args.ops)
    print("lifecycle CPU without syncs (best of %d rounds of %d)" % (args.rounds, args.ops))
    print(f"  huey SqliteHuey(fsync=False)  {huey:7.1f} us")
    print(f"  Desktop Queue                 {ours:7.1f} us   ours/huey {ours / huey:.2f}x")
    budget = huey / 1.5
    verdict = "within" if ours <= budget else "over"
    print(f"  budget for a durable lifecycle >= 1.5x huey: C_ours <= C_huey / 1.5 = {budget:.1f} us ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
