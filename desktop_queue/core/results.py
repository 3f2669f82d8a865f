"""The result store: one durable JSON file per idempotency key, written once, never overwritten."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import orjson

from desktop_queue.core.errors import StoreCorrupt
from desktop_queue.core.fileio import TEMP_MARK, atomic_write

RESULT_FORMAT = "desktop-queue.result"


class ResultStore:
    """Results keyed by idempotency key, under ``<data dir>/results/<k[:2]>/<k>.json``.

    A result is written before its job is marked ``succeeded``; a key that already
    has a result keeps the first one (so a result is never produced twice).

    Args:
        root: the ``results`` directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @staticmethod
    def _safe(key: str) -> str:
        # keys are hex fingerprints or caller-chosen strings; keep file names tame
        if all(c.isalnum() or c in "-_." for c in key) and 0 < len(key) <= 128 and not key.startswith("."):
            return key
        import hashlib

        return "k-" + hashlib.sha256(key.encode()).hexdigest()

    def path_for(self, key: str) -> Path:
        name = self._safe(key)
        return self.root / name[:2] / f"{name}.json"

    def ref_for(self, key: str) -> str:
        """The ``result_ref`` stored on the job: a path relative to the data dir."""
        return str(Path("results") / self.path_for(key).relative_to(self.root))

    def put(self, key: str, result: Any, *, job_id: str, epoch: int, produced_at: float) -> tuple[str, bool]:
        """Stores ``result`` for ``key`` unless one exists.

        Returns:
            ``(result_ref, created)``: created is False when an earlier result was kept.
        """
        path = self.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = orjson.dumps(
            {
                "format": RESULT_FORMAT,
                "schema_version": 1,
                "key": key,
                "job_id": job_id,
                "epoch": epoch,
                "produced_at": produced_at,
                "result": result,
            }
        )
        created = atomic_write(path, body, overwrite=False)
        return self.ref_for(key), created

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored result document for ``key``, or None.

        A damaged result file is moved aside (``*.corrupt-<time>``) and reported as missing.
        """
        path = self.path_for(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
                raise ValueError("not a result file")
            return doc
        except ValueError:
            import time

            stamp = time.strftime("%Y%m%dT%H%M%S")
            target = path.with_name(f"{path.name}.corrupt-{stamp}")
            n = 1
            while target.exists():  # damaged again within the second: keep every copy
                n += 1
                target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
            with contextlib.suppress(OSError):
                os.replace(path, target)
            return None

    def remove_temp_files(self) -> int:
        """Deletes unfinished writes left by a crash (only safe while no other process runs)."""
        removed = 0
        if not self.root.exists():
            return 0
        for path in self.root.glob(f"*/.*{TEMP_MARK}*"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
        return removed

    def has(self, key: str) -> bool:
        return self.path_for(key).exists()

    def count(self) -> int:
        """How many results are stored (walks the directory; for tests and stats)."""
        if not self.root.exists():
            return 0
        return sum(1 for p in self.root.glob("*/*.json"))


__all__ = ["ResultStore", "StoreCorrupt"]
