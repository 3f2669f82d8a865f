"""``desktop-queue profile add/list/test/remove``: real subprocesses, a real server on 127.0.0.1.

Keys go through a file-backed test keyring (``file_keyring.FileKeyring``), so one
process's key is found by the next, and never the user's keyring. The profiles file
lives in the test's config dir (``XDG_CONFIG_HOME`` of the autouse fixture, and
``DESKTOP_QUEUE_CONFIG_DIR`` here), shared by ``profile`` commands, ``work`` and the window.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from fakeserver import FakeOpenAI  # noqa: E402
from provider_helpers import CANARY_KEY  # noqa: E402

from desktop_queue.providers.openai_compat import KEYRING_SERVICE  # noqa: E402

from .conftest import Cli  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    config = tmp_path / "config"
    monkeypatch.setenv("DESKTOP_QUEUE_CONFIG_DIR", str(config))  # the window's side (in-process) too
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return {
        "DESKTOP_QUEUE_CONFIG_DIR": str(config),
        "PYTHON_KEYRING_BACKEND": "file_keyring.FileKeyring",
        "DQ_TEST_KEYRING_FILE": str(tmp_path / "keyring.json"),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "QT_QPA_PLATFORM": "offscreen",
    }


def keyring_entries(env: dict[str, str]) -> dict[str, str]:
    path = Path(env["DQ_TEST_KEYRING_FILE"])
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture
def cloud() -> Any:
    fake = FakeOpenAI(api_key=CANARY_KEY)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def local() -> Any:
    fake = FakeOpenAI(api_key=None)
    fake.start()
    yield fake
    fake.stop()


def test_add_with_key_on_stdin_list_test_remove(dq: Cli, env: dict[str, str], cloud: FakeOpenAI) -> None:
    run = dq.sub(
        "profile",
        "add",
        "cloud",
        "--base-url",
        cloud.url,
        "--model",
        "model-a",
        "--rpm",
        "60",
        "--key-stdin",
        stdin=CANARY_KEY + "\n",
        env=env,
    )
    assert run.code == 0, run.err
    assert "added profile cloud" in run.out
    assert keyring_entries(env) == {f"{KEYRING_SERVICE}\x00cloud": CANARY_KEY}
    saved = (Path(env["DESKTOP_QUEUE_CONFIG_DIR"]) / "profiles.json").read_text()
    assert CANARY_KEY not in saved and '"rpm": 60' in saved

    listed = dq.sub("profile", "list", "--json", env=env)
    assert listed.code == 0, listed.err
    doc = listed.json()
    assert CANARY_KEY not in listed.out
    (profile,) = doc["profiles"]
    assert profile["name"] == "cloud" and profile["default"] and profile["key"] == "keyring"
    assert profile["base_url"] == cloud.url and profile["rpm"] == 60
    text = dq.sub("profile", "list", env=env)
    assert text.code == 0 and "* cloud" in text.out and "key: keyring" in text.out

    tested = dq.sub("profile", "test", "cloud", env=env)
    assert tested.code == 0, tested.err
    assert "cloud: connected; models: model-a, model-b" in tested.out
    assert cloud.count("models") == 1

    removed = dq.sub("profile", "remove", "cloud", env=env)
    assert removed.code == 0 and "removed profile cloud and its key" in removed.out
    assert keyring_entries(env) == {}
    assert dq.sub("profile", "list", "--json", env=env).json()["profiles"] == []


def test_test_names_the_exact_failure_and_exits_1(dq: Cli, env: dict[str, str], cloud: FakeOpenAI) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert dq.sub("profile", "add", "down", "--base-url", f"http://127.0.0.1:{port}/v1", env=env).code == 0
    run = dq.sub("profile", "test", "down", env=env)
    assert run.code == 1
    assert f"down: connection failed: connection refused at 127.0.0.1:{port}" in run.err

    assert (
        dq.sub(
            "profile", "add", "nokey", "--base-url", cloud.url, "--key-stdin", stdin="sk-wrong-123456\n", env=env
        ).code
        == 0
    )
    run = dq.sub("profile", "test", "nokey", "--json", env=env)
    assert run.code == 1 and run.json()["ok"] is False
    assert run.json()["error"].startswith("HTTP 401") and "sk-wrong-123456" not in run.out + run.err


def test_usage_errors_and_duplicates(dq: Cli, env: dict[str, str]) -> None:
    run = dq.sub("profile", "add", "bad name", "--base-url", "http://h/v1", env=env)
    assert run.code == 2 and "not usable" in run.err
    run = dq.sub("profile", "add", "x", "--base-url", "localhost:1234", env=env)
    assert run.code == 2 and "http:// or https://" in run.err
    run = dq.sub("profile", "add", "x", env=env)
    assert run.code == 2 and "--base-url" in run.err
    assert dq.sub("profile", "add", "x", "--base-url", "http://127.0.0.1:1/v1", env=env).code == 0
    run = dq.sub("profile", "add", "x", "--base-url", "http://127.0.0.1:2/v1", env=env)
    assert run.code == 1 and "already exists" in run.err
    assert dq.sub("profile", "add", "x", "--base-url", "http://127.0.0.1:2/v1", "--replace", env=env).code == 0
    run = dq.sub("profile", "remove", "nope", env=env)
    assert run.code == 2 and "no profile named 'nope' (profiles: x)" in run.err
    run = dq.sub("profile", "test", "nope", env=env)
    assert run.code == 2
    # a key is never an argument
    run = dq.sub("profile", "add", "y", "--base-url", "http://h/v1", "--key", "sk-x", env=env)
    assert run.code == 2


def test_a_local_server_needs_no_key_and_no_prompt(dq: Cli, env: dict[str, str], local: FakeOpenAI) -> None:
    run = dq.sub("profile", "add", "ollama", "--base-url", local.url, "--json", env=env)
    assert run.code == 0, run.err
    assert run.json()["require_key"] is False and run.json()["key"] == "not needed"
    assert dq.sub("profile", "test", "ollama", env=env).code == 0


def test_a_profile_added_with_the_cli_is_used_by_work_and_seen_by_preferences(
    dq: Cli, env: dict[str, str], local: FakeOpenAI, cloud: FakeOpenAI, qtbot: Any
) -> None:
    assert (
        dq.sub("profile", "add", "cloud", "--base-url", cloud.url, "--key-stdin", stdin=CANARY_KEY, env=env).code == 0
    )
    assert (
        dq.sub("profile", "add", "ollama", "--base-url", local.url, "--model", "model-b", "--default", env=env).code
        == 0
    )
    ids = []
    for payload in ({"prompt": "to the default"}, {"prompt": "to the cloud", "profile": "cloud"}):
        run = dq.sub("submit", "openai.chat", "--input", json.dumps(payload), "--json", env=env)
        assert run.code == 0, run.err
        ids.append(run.json()["id"])
    run = dq.sub("submit", "openai.chat", "--input", json.dumps({"prompt": "x", "profile": "nope"}), env=env)
    assert run.code == 2 and "unknown profile 'nope'" in run.err

    work = dq.sub("work", "--json", "--until-idle", "--max-seconds", "30", env=env)
    assert work.code == 0, work.err
    assert work.json()["counts"]["succeeded"] == 2
    assert local.count("chat") == 1 and cloud.count("chat") == 1
    assert local.of("chat")[0].body["model"] == "model-b"
    assert CANARY_KEY not in work.out + work.err

    # the window's Preferences read the same file
    from desktop_queue.ui.dialogs import PreferencesDialog
    from desktop_queue.ui.settings import Preferences

    dialog = PreferencesDialog(Preferences())
    qtbot.addWidget(dialog)
    page = dialog.profiles_page
    assert [page.list.item(i).text() for i in range(page.list.count())] == ["cloud", "ollama  (default)"]
    page.list.setCurrentRow(1)
    assert dialog.providers_page.base_url.text() == local.url
    assert not dialog.providers_page.require_key.isChecked()


def test_a_running_worker_follows_a_profile_added_meanwhile(
    dq: Cli, env: dict[str, str], local: FakeOpenAI, cloud: FakeOpenAI, qtbot: Any
) -> None:
    import subprocess

    assert dq.sub("profile", "add", "one", "--base-url", cloud.url, "--key-stdin", stdin=CANARY_KEY, env=env).code == 0
    worker = subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", *dq.argv("work", "--max-seconds", "40")],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert dq.sub("submit", "openai.chat", "--input", '{"prompt": "first"}', env=env).code == 0
        qtbot.waitUntil(lambda: cloud.count("chat") == 1, timeout=30_000)
        # a new default profile while the worker runs: the next unnamed job goes there
        assert dq.sub("profile", "add", "two", "--base-url", local.url, "--default", env=env).code == 0
        assert dq.sub("submit", "openai.chat", "--input", '{"prompt": "second"}', env=env).code == 0
        qtbot.waitUntil(lambda: local.count("chat") == 1, timeout=30_000)
        assert cloud.count("chat") == 1
    finally:
        worker.terminate()
        _out, err = worker.communicate(timeout=30)
    assert "the provider profiles changed" in err.decode()
    assert CANARY_KEY not in err.decode()


def test_adding_a_profile_keeps_the_one_from_the_environment(dq: Cli, env: dict[str, str], local: FakeOpenAI) -> None:
    with_env = {**env, "OPENAI_BASE_URL": local.url}
    listed = dq.sub("profile", "list", "--json", env=with_env).json()
    assert listed["source"] == "environment" and [p["name"] for p in listed["profiles"]] == ["openai"]
    run = dq.sub("profile", "add", "lab", "--base-url", local.url, env=with_env)
    assert run.code == 0 and "is kept in the profiles file" in run.err
    listed = dq.sub("profile", "list", "--json", env=with_env).json()
    assert listed["source"] == "file"
    assert [(p["name"], p["default"]) for p in listed["profiles"]] == [("openai", True), ("lab", False)]


def test_without_a_keyring_a_proxys_key_comes_from_its_own_variable(
    dq: Cli, env: dict[str, str], cloud: FakeOpenAI
) -> None:
    """No keyring (a headless box, WSL): the advice was "set OPENAI_API_KEY", which is never
    sent to a server other than OpenAI's, so a keyed proxy on this machine could not be used."""
    env = {**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    refused = dq.sub("profile", "add", "my-proxy", "--base-url", cloud.url, "--key-stdin", stdin=CANARY_KEY, env=env)
    assert refused.code == 1
    assert "Set DESKTOP_QUEUE_API_KEY_MY_PROXY in the environment instead" in refused.err
    assert "not added" in refused.err and CANARY_KEY not in refused.out + refused.err

    assert dq.sub("profile", "add", "my-proxy", "--base-url", cloud.url, "--default", env=env).code == 0
    keyed = {**env, "DESKTOP_QUEUE_API_KEY_MY_PROXY": CANARY_KEY}
    listed = dq.sub("profile", "list", env=keyed)
    assert "key: $DESKTOP_QUEUE_API_KEY_MY_PROXY" in listed.out, listed.out
    assert dq.sub("profile", "list", "--json", env=keyed).json()["profiles"][0]["key"] == "environment"
    assert dq.sub("submit", "openai.chat", "--input", json.dumps({"prompt": "hello"}), env=keyed).code == 0
    work = dq.sub("work", "--json", "--until-idle", "--max-seconds", "30", env=keyed)
    assert work.code == 0, work.err
    assert work.json()["counts"]["succeeded"] == 1  # the server took the key (it refuses any other)
    assert cloud.count("chat") == 1
    assert CANARY_KEY not in work.out + work.err
