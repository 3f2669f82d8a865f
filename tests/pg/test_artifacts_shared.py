"""A result's artifact (an image, an audio file) reaches every machine that shares the queue.

The file is written in the data dir of the machine whose worker made it; the success's
commit stores its bytes in the database too, and another machine that shows the result
fetches them into its own data dir, checked against their checksum.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from desktop_queue.core import Queue, State
from desktop_queue.core.pg import PgBackend
from desktop_queue.core.result_view import ResultKind, read_result

#: a real PNG's first bytes, then noise (what a view shows is told by the mime type)
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(3000)


@pytest.fixture
def two_machines(open_pg: Callable[..., Queue], pg_dsn: str, tmp_path: Path) -> tuple[Queue, Queue]:
    """A worker's queue (the test's data dir) and a window's on another machine (a data dir of its own)."""
    worker = open_pg()
    window = Queue.open(tmp_path / "studio", backend=PgBackend(pg_dsn))
    yield worker, window
    window.close()


def _image_job(queue: Queue, n: int = 1) -> tuple[str, str]:
    """Runs an image job on ``queue``; returns (job id, the artifact's ref)."""
    job = queue.submit("demo", {"prompt": f"a cat {n}"}).job
    lease = queue.lease("render-box")
    assert lease is not None and lease.job_id == job.id
    done = queue.complete(lease, {"artifact_b64": base64.b64encode(PNG).decode(), "mime": "image/png"})
    assert done.state == State.SUCCEEDED
    doc = queue.results.get(job.idempotency_key)
    assert doc is not None
    return job.id, doc["result"]["artifact_ref"]


def test_another_machine_shows_the_image_a_worker_made(two_machines: tuple[Queue, Queue], tmp_path: Path) -> None:
    worker, window = two_machines
    job_id, ref = _image_job(worker)
    mine = worker.data_dir / ref
    assert mine.read_bytes() == PNG
    theirs = window.data_dir / ref
    assert not theirs.exists()
    content = read_result(window.results, window.get(job_id))
    assert content.kind is ResultKind.IMAGE, content.message
    assert content.path == theirs and theirs.read_bytes() == PNG and content.problem is None
    # the path `show` prints is there too, and asking again reads the file, not the server
    assert window.results.artifact_path(window.get(job_id).idempotency_key) == theirs
    with psycopg.connect(window.store.dsn) as conn:  # type: ignore[attr-defined]
        conn.execute("DELETE FROM dq_artifacts")
    assert read_result(window.results, window.get(job_id)).kind is ResultKind.IMAGE


def test_a_damaged_stored_artifact_is_not_shown_as_the_image(two_machines: tuple[Queue, Queue], pg_dsn: str) -> None:
    worker, window = two_machines
    job_id, ref = _image_job(worker)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("UPDATE dq_artifacts SET data = %s WHERE ref = %s", (b"not the image", ref))
    content = read_result(window.results, window.get(job_id))
    assert content.kind is ResultKind.NONE and content.problem is not None and "missing or damaged" in content.problem
    assert not (window.data_dir / ref).exists()  # (nothing damaged was kept)
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT sha256 FROM dq_artifacts WHERE ref = %s", (ref,)).fetchone()
    assert row == (hashlib.sha256(PNG).hexdigest(),)  # (stored with the checksum of what was made)


def test_a_lost_local_copy_comes_back_from_the_database(two_machines: tuple[Queue, Queue], pg_dsn: str) -> None:
    worker, window = two_machines
    job_id, ref = _image_job(worker)
    (worker.data_dir / ref).unlink()  # the worker's copy is gone: the database still has it
    assert read_result(worker.results, worker.get(job_id)).kind is ResultKind.IMAGE
    assert (worker.data_dir / ref).read_bytes() == PNG
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM dq_artifacts").fetchone() == (1,)


def test_a_purge_deletes_the_artifacts_of_its_jobs(two_machines: tuple[Queue, Queue], pg_dsn: str) -> None:
    worker, window = two_machines
    _image_job(worker, 1)
    _image_job(worker, 2)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM dq_artifacts").fetchone() == (2,)
    assert worker.purge(worker.clock.now() + 1) == 2
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM dq_artifacts").fetchone() == (0,)


def _laptop_export(tmp_path: Path, answer: str, *, image: bool = False) -> tuple[bytes, str, str | None]:
    """An export with results of a laptop's own data dir: a poem answered ``answer`` (and an
    image); returns (the export, the poem's job id, the image's job id)."""
    import io

    from desktop_queue.core.export import exported_result, write_export

    with Queue.open(tmp_path / "laptop") as laptop:
        poem = laptop.submit("demo", {"prompt": "a poem"}).job
        lease = laptop.lease("w")
        assert lease is not None
        laptop.complete(lease, {"text": answer})
        image_id = _image_job(laptop)[0] if image else None
        out = io.BytesIO()
        results = laptop.results
        write_export(laptop.find_jobs(), out, "jsonl", with_input=True, result_of=lambda j: exported_result(results, j))
    return out.getvalue(), poem.id, image_id


def test_an_imported_result_reaches_every_machine(two_machines: tuple[Queue, Queue], tmp_path: Path) -> None:
    """An export with results, imported on one machine of a shared queue: the others
    showed "result file missing" for its jobs, as their results stayed in that
    machine's data dir."""
    from desktop_queue.core.export import read_export

    worker, window = two_machines
    exported, poem_id, image_id = _laptop_export(tmp_path, "roses, queues", image=True)
    imported = worker.import_jobs(list(read_export(exported)))
    assert imported.results == 2 and imported.without_result == []

    copy = window.get(poem_id)
    assert copy.state == State.SUCCEEDED and window.results.problem(copy.idempotency_key) is None
    assert window.results.get(copy.idempotency_key)["result"] == {"text": "roses, queues"}
    assert image_id is not None
    content = read_result(window.results, window.get(image_id))
    assert content.kind is ResultKind.IMAGE, content.message
    assert content.path is not None and content.path.read_bytes() == PNG
    again = window.submit("demo", {"prompt": "a poem"})
    assert again.duplicate and again.result is not None  # the answer is in the queue: nothing paid again


def test_an_import_keeps_a_result_stored_meanwhile_for_the_same_key(
    two_machines: tuple[Queue, Queue], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Results are written once: one stored by another machine while the import ran stays the key's."""
    import json

    from desktop_queue.core.export import read_export

    worker, window = two_machines
    exported, poem_id, _none = _laptop_export(tmp_path, "imported")
    docs = list(read_export(exported))
    key = docs[0]["idempotency_key"]
    theirs = window.results.document(key, {"text": "theirs"}, job_id="x", epoch=1, produced_at=1.0)
    commit = worker.store.commit
    first = {"done": False}

    def racing(fn, **kwargs):  # type: ignore[no-untyped-def]
        if not first["done"]:  # another machine stores a result for the key before the import commits
            first["done"] = True
            with psycopg.connect(window.store.dsn, autocommit=True) as conn:  # type: ignore[attr-defined]
                conn.execute(
                    "INSERT INTO dq_results (key, doc) VALUES (%s, %s::jsonb)",
                    (key, json.dumps(theirs)),
                )
        return commit(fn, **kwargs)

    monkeypatch.setattr(worker.store, "commit", racing)
    imported = worker.import_jobs(docs)
    assert imported.added == [poem_id]
    assert window.results.get(key)["result"] == {"text": "theirs"}
