"""The result store writes artifacts as files: first the file, then the JSON that refers to it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core.results import InvalidArtifact, ResultStore, artifact_extension
from desktop_queue.core.store import fileio

BYTES = b"\x89PNG\r\n\x1a\nsome pixels"


def artifact_result(data: bytes = BYTES, **extra: Any) -> dict[str, Any]:
    return {"artifact_b64": base64.b64encode(data).decode(), "artifact_name": "k.png", "mime": "image/png", **extra}


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return ResultStore(tmp_path / "data" / "results")


def test_the_artifact_is_written_before_the_json_result(store: ResultStore, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    real = fileio.atomic_write

    def spy(path: Path, data: bytes, *, overwrite: bool = True, durable: bool = True) -> bool:
        order.append(path.suffix)
        if path.suffix == ".json":
            assert (path.with_suffix(".png")).read_bytes() == BYTES  # already durable
        else:
            assert durable  # an artifact is not in the journal: its file must be synced
        return real(path, data, overwrite=overwrite, durable=durable)

    monkeypatch.setattr("desktop_queue.core.results.atomic_write", spy)
    ref, created = store.put("abc123", artifact_result(text="kept"), job_id="j", epoch=1, produced_at=1.0)

    assert created and ref == "results/ab/abc123.json"
    assert order == [".png", ".json"]
    doc = store.get("abc123")
    assert doc is not None
    result = doc["result"]
    assert "artifact_b64" not in result and result["text"] == "kept"
    assert result["artifact_ref"] == "results/ab/abc123.png"
    assert result["artifact_bytes"] == len(BYTES) and result["mime"] == "image/png"
    assert store.artifact_path("abc123") == (store.root / "ab" / "abc123.png").resolve()


def test_a_crash_between_artifact_and_json_keeps_the_first_file_and_describes_it(store: ResultStore) -> None:
    path = store.artifact_path_for("abc123", "png")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"first complete artifact")  # left by an attempt that died before its JSON

    store.put("abc123", artifact_result(b"second"), job_id="j", epoch=2, produced_at=1.0)

    assert path.read_bytes() == b"first complete artifact"
    doc = store.get("abc123")
    assert doc is not None and doc["result"]["artifact_bytes"] == len(b"first complete artifact")


def test_write_once_keeps_the_first_result_and_writes_no_artifact(store: ResultStore) -> None:
    store.put("key-1", {"text": "first"}, job_id="j", epoch=1, produced_at=1.0)

    ref, created = store.put("key-1", artifact_result(), job_id="j", epoch=2, produced_at=2.0)

    assert not created and ref == store.ref_for("key-1")
    assert [p.name for p in (store.root / "ke").iterdir()] == ["key-1.json"]
    doc = store.get("key-1")
    assert doc is not None and doc["result"] == {"text": "first"}


def test_invalid_base64_stores_nothing(store: ResultStore) -> None:
    with pytest.raises(InvalidArtifact):
        store.put("key-2", {"artifact_b64": "not base64 !!", "mime": "image/png"}, job_id="j", epoch=1, produced_at=1.0)
    assert not store.has("key-2") and store.count() == 0


def test_results_without_artifacts_are_unchanged(store: ResultStore) -> None:
    store.put("key-3", {"text": "hi", "usage": {"total_tokens": 3}}, job_id="j", epoch=1, produced_at=1.0)
    raw = json.loads(store.path_for("key-3").read_text())
    assert raw["result"] == {"text": "hi", "usage": {"total_tokens": 3}}
    assert store.artifact_path("key-3") is None


@pytest.mark.parametrize(
    ("name", "mime", "ext"),
    [
        ("k.png", "image/png", "png"),
        ("k.WAV", "audio/wav", "wav"),
        (None, "audio/mpeg", "mp3"),
        ("k.json", "image/png", "png"),  # never the result document's own extension
        ("k", "application/x-unknown", "bin"),
        ("k.tar/../../x", None, "bin"),
    ],
)
def test_artifact_extension(name: str | None, mime: str | None, ext: str) -> None:
    assert artifact_extension(name, mime) == ext


def test_refs_outside_the_store_are_refused(store: ResultStore) -> None:
    with pytest.raises(ValueError):
        store.resolve("../../etc/passwd")
