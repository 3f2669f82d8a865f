"""Bulk dead-letter verbs: one durable commit per job (``Queue.retry`` in a loop, what the
window's "Retry all matching" did) against one per chunk of 500 (``Queue.retry_many``).

Both run in the same process on two copies of one store of N dead letters (``--dead``,
3,021 by default: the number a user retried in 130 s), with real fsyncs, so the ratio
holds whatever the disk. Also timed: ``resolve_many`` and ``replay_many`` of the same
dead letters, and ``dead_letter_groups``.

Usage: ``python benchmarks/bulk.py [--dead N] [--keep-hot N]``
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from desktop_queue.core import Outcome, Queue
from desktop_queue.providers.demo import DemoProvider


def populate(path: Path, dead: int, keep_hot: int) -> list[str]:
    queue = Queue.open(path, {"demo": DemoProvider()}, keep_finished=keep_hot, background_compaction=False)
    try:
        ids: list[str] = []
        for start in range(0, dead, 1000):
            payloads = [{"prompt": f"dead letter {i}"} for i in range(start, min(dead, start + 1000))]
            ids.extend(r.job.id for r in queue.submit_many("demo", payloads))
        for number in range(dead):
            lease = queue.lease("bench")
            assert lease is not None
            status = (401, 429, 400)[number % 3]
            queue.fail(lease, Outcome.failure("fatal", f"demo: HTTP {status} req_{number:06d}abc", status=status))
        queue.store.compact_now()
        return ids
    finally:
        queue.close()


def timed(label: str, fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    took = time.perf_counter() - start
    print(f"  {label:<44} {took:8.2f} s")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dead", type=int, default=3021)
    parser.add_argument("--keep-hot", type=int, default=1000, help="finished jobs the hot set keeps")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        print(f"populating {args.dead:,} dead letters ({args.keep_hot:,} of them hot)…")
        ids = populate(base, args.dead, args.keep_hot)
        copies = {}
        for name in ("loop", "many", "resolve", "replay"):
            copies[name] = Path(tmp) / name
            shutil.copytree(base, copies[name])
        providers = {"demo": DemoProvider()}
        queues = {n: Queue.open(p, providers, keep_finished=args.keep_hot) for n, p in copies.items()}
        try:
            print("timings:")
            loop = timed("retry one by one (reference)", lambda: [queues["loop"].retry(i) for i in ids])
            many = timed("retry_many, chunks of 500", lambda: queues["many"].retry_many(ids))
            timed("resolve_many, chunks of 500", lambda: queues["resolve"].resolve_many(ids))
            timed("replay_many, chunks of 500", lambda: queues["replay"].replay_many(ids))
            timed("dead_letter_groups (hot + archived)", lambda: queues["loop"].dead_letter_groups())
            for name in ("loop", "many"):
                assert queues[name].counts()["queued"] == args.dead, name
            print(f"retry_many is {loop / many:.1f}× faster than one commit per job")
        finally:
            for queue in queues.values():
                queue.close()


if __name__ == "__main__":
    main()
