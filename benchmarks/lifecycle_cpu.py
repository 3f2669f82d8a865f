"""Where a job's life goes: CPU with every sync turned off, then what each sync costs.

``benchmarks/store.py`` measures durable lifecycles (submit, lease, complete) against
huey's SQLite storage. A durable lifecycle costs ours two syncs (submit and success; the
lease is synced before a provider call, which this lifecycle has none of) and huey three
(one per SQLite commit). With S the cost of one sync (its wait included) and C the CPU
of the rest:

    ours / huey = (3 S_huey + C_huey) / (2 S_ours + C_ours)

This script measures both C (the same lifecycles as ``store.py``, with ``fdatasync``/
``fsync`` made no-ops here and huey opened with ``fsync=False``), then both durable
lifecycles on the same kind of fresh stores, and derives each side's S from the
difference. With equal syncs the ratio is at least 1.5 exactly when
``C_ours <= C_huey / 1.5``, whatever a sync costs; a sync that writes only data into
space filled in advance (ours) costs less than SQLite's, which leaves more room.

Each figure is the best of several rounds on a fresh store, with rotation and
compaction out of the way (``store.py`` counts them). The durable figures depend on the
disk of the moment: run it on a quiet machine, and read ``store.py`` for the verdict.

Usage: ``.venv/bin/python benchmarks/lifecycle_cpu.py [--rounds N] [--ops N]``
(needs the ``bench`` extra for huey).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import HueySubject, OursSubject, fsync_suspended, payload_for, result_for  # noqa: E402

#: journal bytes one lifecycle of these payloads writes, rounded up (about 2.2 KB)
LIFECYCLE_BYTES = 3 << 10

#: syncs per lifecycle: ours (submit, success), huey (enqueue, dequeue, result)
SYNCS_OURS = 2
SYNCS_HUEY = 3


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


def measure_ours(root: Path, rounds: int, ops: int, *, durable: bool) -> float:
    """Desktop Queue through the public API (syncs turned off in this process unless ``durable``).

    Segments never rotate here, so no compaction runs meanwhile (``store.py`` counts it):
    the one segment is created (filled with zeros, synced) at open, with room for every
    round. Not much more: the zeros are written before the clock starts, but a far
    larger file (1 GiB) slowed the syncs that followed.
    """
    room = (200 + rounds * ops) * LIFECYCLE_BYTES
    subject = OursSubject(root / ("ours-durable" if durable else "ours"), rotate_bytes=room)
    with contextlib.nullcontext() if durable else fsync_suspended():
        subject.open()
        try:
            return _best(lambda i: subject.lifecycle(payload_for("cpu", i), result_for(i)), rounds, ops)
        finally:
            subject.close()


def measure_huey(root: Path, rounds: int, ops: int, *, durable: bool) -> float:
    """huey's ``SqliteHuey``: enqueue, dequeue, put_result (``fsync=False`` unless ``durable``)."""
    subject = HueySubject(root / ("huey-durable" if durable else "huey"), fsync=durable)
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
        c_huey = measure_huey(root, args.rounds, args.ops, durable=False)
        c_ours = measure_ours(root, args.rounds, args.ops, durable=False)
        d_huey = measure_huey(root, args.rounds, args.ops, durable=True)
        d_ours = measure_ours(root, args.rounds, args.ops, durable=True)
    s_huey = (d_huey - c_huey) / SYNCS_HUEY
    s_ours = (d_ours - c_ours) / SYNCS_OURS
    print(f"lifecycle CPU without syncs (best of {args.rounds} rounds of {args.ops})")
    print(f"  huey SqliteHuey(fsync=False)  {c_huey:7.1f} us")
    print(f"  Desktop Queue                 {c_ours:7.1f} us   ours/huey {c_ours / c_huey:.2f}x")
    budget = c_huey / 1.5
    verdict = "within" if c_ours <= budget else "over"
    print(f"  with equal syncs, 1.5x huey needs C_ours <= C_huey / 1.5 = {budget:.1f} us ({verdict})")
    print("durable lifecycle (same rounds), and each side's sync derived from it")
    print(
        f"  huey SqliteHuey(fsync=True)   {d_huey:7.1f} us   S_huey = ({d_huey:.0f} - {c_huey:.0f}) / 3 = {s_huey:.1f} us"
    )
    print(
        f"  Desktop Queue                 {d_ours:7.1f} us   S_ours = ({d_ours:.0f} - {c_ours:.0f}) / 2 = {s_ours:.1f} us"
    )
    print(
        f"  ours/huey throughput {d_huey / d_ours:.2f}x (store.py's figure, with rotation and compaction, is the verdict)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
