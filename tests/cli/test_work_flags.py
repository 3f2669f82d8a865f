"""``desktop-queue work`` flow-control flags against the fake OpenAI server on 127.0.0.1.

``--provider-concurrency``, ``--rpm``, ``--tpm`` and ``--model`` configure the same
provider profile the window uses; the server counts in-flight requests and records
every body, so the tests see what really went over the wire. The worker is a real
``python -m desktop_queue work`` subprocess.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from fakeserver import PNG_BYTES, FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY as KEY  # noqa: E402
from provider_helpers import server  # noqa: E402, F401  (fixture)

from .conftest import Cli  # noqa: E402

OK = 0


@pytest.fixture
def env(server: FakeOpenAI, tmp_path: Path) -> dict[str, str]:
    """The worker's environment: the fake endpoint, its key, never the user's keyring."""
    return {
        "OPENAI_BASE_URL": server.url,
        "OPENAI_API_KEY": KEY,
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
        "QT_QPA_PLATFORM": "offscreen",
    }


def submit_chat(dq: Cli, n: int, **extra: Any) -> list[str]:
    ids = []
    for i in range(n):
        payload = {"prompt": f"chat job {i}", **extra}
        run = dq.run("submit", "openai.chat", "--input", json.dumps(payload), "--json")
        assert run.code == OK, run.err
        ids.append(run.json()["id"])
    return ids


def work(dq: Cli, env: dict[str, str], *flags: str) -> dict[str, Any]:
    run = dq.sub("work", "--json", *flags, env=env)
    assert run.code == OK, run.err
    assert KEY not in run.out + run.err
    summary: dict[str, Any] = run.json()
    return summary


@pytest.mark.parametrize(("flags", "most"), [(["--provider-concurrency", "1"], 1), ([], 4)])
def test_provider_concurrency_caps_the_requests_in_flight(
    dq: Cli, server: FakeOpenAI, env: dict[str, str], flags: list[str], most: int
) -> None:
    server.default_delay_s = 0.3  # each answer takes a while: parallel requests would overlap
    submit_chat(dq, 4)

    summary = work(dq, env, "--concurrency", "4", "--until-idle", "--max-seconds", "30", *flags)

    assert summary["stopped"] == "idle" and summary["counts"]["succeeded"] == 4
    assert server.count("chat") == 4
    if most == 1:
        assert server.max_in_flight == 1
    else:  # without the flag the same jobs do overlap: the cap above is what held them back
        assert server.max_in_flight > 1


def test_rpm_admits_no_more_requests_than_the_budget(dq: Cli, server: FakeOpenAI, env: dict[str, str]) -> None:
    submit_chat(dq, 4)

    summary = work(dq, env, "--rpm", "2", "--max-seconds", "2.5")

    assert summary["stopped"] == "time limit reached"
    assert server.count("chat") == 2  # the third would be 60 s later
    assert summary["counts"]["succeeded"] == 2 and summary["counts"]["queued"] == 2
    jobs = dq.jobs()
    assert sorted(j["total_attempts"] for j in jobs) == [0, 0, 1, 1]  # the held ones spent nothing


def test_tpm_admits_by_estimated_tokens_and_settles_on_reported_usage(
    dq: Cli, server: FakeOpenAI, env: dict[str, str]
) -> None:
    server.usage_tokens = 200  # what each answer reports it used
    submit_chat(dq, 4, max_tokens=100)  # estimated ~105 tokens each

    summary = work(dq, env, "--tpm", "250", "--concurrency", "4", "--max-seconds", "2.5")

    # two estimates fit the 250-token budget; once settled at 200 each, nothing more fits this minute
    assert server.count("chat") == 2
    assert summary["counts"] == {**summary["counts"], "succeeded": 2, "queued": 2}


def test_model_is_the_default_of_jobs_that_name_none(dq: Cli, server: FakeOpenAI, env: dict[str, str]) -> None:
    submit_chat(dq, 1)
    submit_chat(dq, 1, model="explicit-model")

    summary = work(dq, env, "--model", "local-llama", "--until-idle", "--max-seconds", "30")

    assert summary["counts"]["succeeded"] == 2
    assert sorted(r.body["model"] for r in server.of("chat")) == ["explicit-model", "local-llama"]


def test_an_image_job_stores_its_png_as_a_file_that_show_points_to(
    dq: Cli, server: FakeOpenAI, env: dict[str, str]
) -> None:
    run = dq.run("submit", "openai.image", "--input", json.dumps({"prompt": "a red fox"}), "--json")
    assert run.code == OK, run.err
    job_id = run.json()["id"]

    summary = work(dq, env, "--until-idle", "--max-seconds", "30")

    assert summary["counts"]["succeeded"] == 1
    shown = dq.run("show", job_id, "--json").json()
    artifact = Path(shown["artifact_path"])
    assert artifact.read_bytes() == PNG_BYTES and artifact.suffix == ".png"
    assert artifact.parent == (dq.data_dir / shown["result_ref"]).parent.resolve()
    assert "artifact_b64" not in shown["result"] and shown["result"]["artifact_bytes"] == len(PNG_BYTES)
    text = dq.run("show", job_id).out
    assert f"artifact  {artifact}" in text
