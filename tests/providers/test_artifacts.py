"""Artifacts of ``openai.image`` and ``openai.speech`` land as files in the result store.

Through a real :class:`Queue` (lease -> provider.run -> complete) against the fake
OpenAI server on 127.0.0.1: the file next to the JSON result holds the exact bytes the
server sent, and the stored JSON refers to it instead of carrying base64.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakeserver import AUDIO_BYTES, PNG_BYTES, FakeOpenAI
from provider_helpers import step

from desktop_queue.core import Queue, State
from desktop_queue.providers.openai_compat import OpenAIProfile, make_providers


@pytest.mark.parametrize(
    ("kind", "payload", "expected", "ext", "mime"),
    [
        ("openai.image", {"prompt": "a red fox in the snow"}, PNG_BYTES, "png", "image/png"),
        ("openai.speech", {"input": "hello there", "format": "mp3"}, AUDIO_BYTES, "mp3", "audio/mpeg"),
        ("openai.speech", {"input": "hello there", "format": "wav"}, AUDIO_BYTES, "wav", "audio/wav"),
    ],
)
def test_an_artifact_is_a_file_next_to_its_json_result_with_the_exact_bytes(
    server: FakeOpenAI,
    profile: OpenAIProfile,
    open_queue: Callable[..., Queue],
    kind: str,
    payload: dict[str, Any],
    expected: bytes,
    ext: str,
    mime: str,
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    job = queue.submit(kind, payload).job

    ran = step(queue, providers)

    assert ran is not None and ran[1].ok, ran
    done = queue.get(job.id)
    assert done.state == State.SUCCEEDED
    data_dir = queue.results.root.parent
    key = done.idempotency_key
    # named by the lease epoch that produced it: no other holder's file can stand in for it
    artifact = queue.results.root / key[:2] / f"{key}-e{done.lease_epoch}.{ext}"
    assert artifact.read_bytes() == expected
    assert queue.results.artifact_path(key) == artifact.resolve()
    result_file = data_dir / str(done.result_ref)
    assert queue.results.materialize(key) == result_file  # the journal carries it until compaction
    assert result_file == queue.results.path_for(key) and result_file.parent == artifact.parent
    raw = result_file.read_text()
    assert "artifact_b64" not in raw
    assert base64.b64encode(expected).decode() not in raw
    stored = json.loads(raw)["result"]
    assert stored["artifact_ref"] == f"results/{key[:2]}/{key}-e{done.lease_epoch}.{ext}"
    assert (data_dir / stored["artifact_ref"]).read_bytes() == expected
    assert stored["artifact_bytes"] == len(expected)
    assert stored["artifact_sha256"] == hashlib.sha256(expected).hexdigest()
    assert stored["mime"] == mime
    assert server.count() == 1


def test_a_second_run_of_the_same_key_keeps_the_first_artifact(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue]
) -> None:
    providers = make_providers(profile)
    queue = open_queue(providers)
    first = queue.submit("openai.image", {"prompt": "a lighthouse"}).job
    assert step(queue, providers) is not None
    key = first.idempotency_key
    artifact = queue.results.artifact_path(key)
    assert artifact is not None
    before = artifact.stat().st_mtime_ns

    # a replay is a new job with its own key: it gets its own file
    replay = queue.replay(first.id)
    assert step(queue, providers) is not None
    other = queue.results.artifact_path(queue.get(replay.id).idempotency_key)
    assert other is not None and other != artifact and other.read_bytes() == PNG_BYTES

    # a late writer for the first key changes nothing
    ref, created = queue.results.put(
        key,
        {"artifact_b64": base64.b64encode(b"other bytes").decode(), "mime": "image/png"},
        job_id="late",
        epoch=99,
        produced_at=0.0,
    )
    assert created is False and ref == queue.get(first.id).result_ref
    assert artifact.read_bytes() == PNG_BYTES and artifact.stat().st_mtime_ns == before
    for job_id in (first.id, replay.id):
        queue.results.materialize(queue.get(job_id).idempotency_key)
    assert sorted(p.suffix for p in Path(queue.results.root).glob("*/*")) == [".json", ".json", ".png", ".png"]
