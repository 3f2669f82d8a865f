"""``desktop-queue replay ID --dry-run`` reads the profiles file: a dead job of profile "lab"
is previewed against lab's key and state. Real subprocesses, a real server on 127.0.0.1,
keys in a file-backed test keyring (never the user's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402

from desktop_queue.providers.openai_compat import KEYRING_SERVICE, key_fingerprint  # noqa: E402

from .conftest import Cli  # noqa: E402
from .test_profile_cli import env, keyring_entries  # noqa: E402, F401  (fixture)

GOOD_KEY = "sk-good-0b1c2d3e4f5a6b7c8d9e0f1a2b3c"
OLD_KEY = "sk-revoked-9e8d7c6b5a4f3e2d1c0b9a8f"


@pytest.fixture
def servers() -> Any:
    local, strict = FakeOpenAI(api_key=None), FakeOpenAI(api_key=GOOD_KEY)
    local.start()
    strict.start()
    yield local, strict
    local.stop()
    strict.stop()


def set_key(env: dict[str, str], profile: str, key: str | None) -> None:
    entries = keyring_entries(env)
    if key is None:
        entries.pop(f"{KEYRING_SERVICE}\x00{profile}", None)
    else:
        entries[f"{KEYRING_SERVICE}\x00{profile}"] = key
    Path(env["DQ_TEST_KEYRING_FILE"]).write_text(json.dumps(entries))


def texts(preview: dict[str, Any]) -> list[str]:
    return [f"[{f['level']}] {f['text']}" for f in preview["findings"]]


def test_a_dead_job_of_profile_lab_is_previewed_against_lab(
    dq: Cli, env: dict[str, str], servers: tuple[FakeOpenAI, FakeOpenAI]
) -> None:
    local, strict = servers
    assert dq.sub("profile", "add", "main", "--base-url", local.url, "--default", env=env).code == 0
    add = dq.sub("profile", "add", "lab", "--base-url", strict.url, "--key-stdin", stdin=OLD_KEY, env=env)
    assert add.code == 0, add.err
    run = dq.sub("submit", "openai.chat", "--input", '{"prompt": "tides", "profile": "lab"}', "--json", env=env)
    assert run.code == 0, run.err
    job_id = run.json()["id"]
    work = dq.sub("work", "--json", "--until-idle", "--max-seconds", "30", env=env)
    assert work.code == 0, work.err
    shown = dq.sub("show", job_id, "--json", env=env).json()
    assert shown["state"] == "dead" and shown["last_error"]["status"] == 401
    assert shown["last_error"]["key_fp"] == key_fingerprint(OLD_KEY)
    for path in dq.data_dir.rglob("*"):
        if path.is_file():
            assert OLD_KEY.encode() not in path.read_bytes(), path

    # lab's key is unchanged: it will fail the same way (main, the default, has nothing to do with it)
    same = dq.sub("replay", job_id, "--dry-run", "--json", env=env)
    assert same.code == 0, same.err
    preview = same.json()
    assert preview["verdict"] == "fail", texts(preview)
    assert any("[fail]" in t and "key of profile lab is unchanged since the 401" in t for t in texts(preview))
    plain = dq.sub("replay", job_id, "--dry-run", env=env)
    assert "profile lab is unchanged" in plain.out and "nothing was queued (--dry-run)" in plain.out

    # a new key for lab: the preview says so
    set_key(env, "lab", GOOD_KEY)
    changed = dq.sub("replay", job_id, "--dry-run", "--json", env=env).json()
    assert changed["verdict"] == "ok", texts(changed)
    assert any("key of profile lab has changed since" in t for t in texts(changed))

    # no key for lab at all: lab cannot run (not "main", whose server needs none)
    set_key(env, "lab", None)
    keyless = dq.sub("replay", job_id, "--dry-run", "--json", env=env).json()
    assert any("[wait] profile lab cannot run jobs now: no API key for profile lab" in t for t in texts(keyless))
    assert any("[fail]" in t and "profile lab has no key now" in t for t in texts(keyless)), texts(keyless)
    assert dq.sub("list", "--json", "--state", "queued", env=env).json() == []  # nothing queued
    assert OLD_KEY not in same.out + same.err + plain.out + work.out + work.err


def test_a_batch_template_may_name_a_profile_that_is_not_the_default(
    dq: Cli, env: dict[str, str], servers: tuple[FakeOpenAI, FakeOpenAI], tmp_path: Path
) -> None:
    local, strict = servers
    assert dq.sub("profile", "add", "main", "--base-url", local.url, "--default", env=env).code == 0
    assert dq.sub("profile", "add", "lab", "--base-url", strict.url, "--no-key", env=env).code == 0
    lines = tmp_path / "prompts.txt"
    lines.write_text("Write a haiku\nWrite a limerick\n", encoding="utf-8")
    template = json.dumps({"prompt": "", "profile": "lab"})
    run = dq.sub("submit", "openai.chat", "--batch", str(lines), "--input", template, "--json", env=env)
    assert run.code == 0, run.err
    assert [(j["input"]["profile"], j["title"]) for j in run.json()] == [
        ("lab", "Write a haiku"),
        ("lab", "Write a limerick"),
    ]
    csv_file = tmp_path / "jobs.csv"
    csv_file.write_text("prompt,profile\nto main,main\nto the lab,lab\n", encoding="utf-8")
    run = dq.sub("submit", "openai.chat", "--batch", str(csv_file), "--json", env=env)
    assert run.code == 0, run.err
    assert [j["input"]["profile"] for j in run.json()] == ["main", "lab"]
