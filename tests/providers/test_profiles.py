"""providers.profiles: the one profiles file, its validation, fallbacks, and routing jobs by profile."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
from fakeserver import FakeOpenAI
from provider_helpers import CANARY_KEY, JobView, MemoryKeyring

from desktop_queue.core import FakeClock, RunContext
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.flow import WAITING_CONCURRENCY
from desktop_queue.providers.openai_compat import KEYRING_SERVICE, make_providers, resolve_api_key
from desktop_queue.providers.profiles import (
    PRESETS,
    SOURCE_ENVIRONMENT,
    SOURCE_FILE,
    SOURCE_NONE,
    NewerProfileFile,
    ProfileSet,
    load_profiles,
    migrate_legacy,
    profiles_path,
    save_profiles,
)
from desktop_queue.providers.setup import ProfileConfig, ProfileRouter, build, reconfigure

OPENAI = ProfileConfig(name="openai", base_url="https://api.openai.com/v1", model="gpt-4o-mini", rpm=60)
OLLAMA = ProfileConfig(
    name="ollama", base_url="http://localhost:11434/v1", model="llama3.2", require_key=False, concurrency=1
)


def two() -> ProfileSet:
    return ProfileSet((OPENAI, OLLAMA), "openai")


# ---------------------------------------------------------------------- the file


def test_profiles_round_trip_through_one_atomic_file(tmp_path: Path) -> None:
    models = ProfileConfig(name="lab", base_url="http://10.0.0.5:8000/v1", models=("a", "b"), budget_usd_per_day=5.0)
    path = save_profiles(two().with_profile(models).with_default("ollama"), tmp_path)
    assert path == tmp_path / "profiles.json"
    assert [p.name for p in tmp_path.iterdir()] == ["profiles.json"]  # no temp file left behind
    doc = json.loads(path.read_text())
    assert doc["format"] == "desktop-queue.profiles" and doc["schema_version"] == 1 and doc["checksum"]
    loaded = load_profiles(tmp_path)
    assert loaded.source == SOURCE_FILE
    assert loaded.profiles == (OPENAI, OLLAMA, models)
    assert loaded.default_name() == "ollama"
    assert [p.name for p in loaded.ordered()] == ["ollama", "openai", "lab"]


def test_the_config_dir_comes_from_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKTOP_QUEUE_CONFIG_DIR", str(tmp_path / "cfg"))
    save_profiles(two())
    assert (tmp_path / "cfg" / "profiles.json").exists()
    assert profiles_path() == tmp_path / "cfg" / "profiles.json"
    assert load_profiles().names() == ["openai", "ollama"]


def write(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(doc) if not isinstance(doc, bytes) else doc)


@pytest.mark.parametrize(
    ("profile", "field"),
    [
        ({"base_url": "localhost:11434"}, "profiles.bad.base_url"),
        ({"rpm": -3}, "profiles.bad.rpm"),
        ({"concurrency": 1.5}, "profiles.bad.concurrency"),
        ({"require_key": "yes"}, "profiles.bad.require_key"),
        ({"models": "a,b"}, "profiles.bad.models"),
        ({"api_key": "sk-x"}, "profiles.bad.api_key"),  # a key never belongs in the file
    ],
)
def test_a_bad_field_names_the_file_and_the_field_and_the_file_is_set_aside(
    tmp_path: Path, profile: dict[str, Any], field: str
) -> None:
    path = tmp_path / "profiles.json"
    doc = {"format": "desktop-queue.profiles", "schema_version": 1, "default": None, "profiles": {"bad": profile}}
    write(path, doc)
    raw = path.read_bytes()
    loaded = load_profiles(tmp_path, env={})
    assert loaded.source == SOURCE_NONE and loaded.names() == ["openai"]  # the fallback
    (notice,) = loaded.notices
    assert str(path) in notice and field in notice
    aside = list(tmp_path.glob("profiles.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == raw  # kept, not lost
    assert str(aside[0]) in notice


def test_a_torn_file_is_set_aside_and_the_environment_is_used(tmp_path: Path) -> None:
    write(tmp_path / "profiles.json", b'{"format": "desktop-queue.profiles", "sche')
    loaded = load_profiles(tmp_path, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert loaded.source == SOURCE_ENVIRONMENT
    assert "not valid JSON" in loaded.notices[0]
    assert list(tmp_path.glob("profiles.json.corrupt-*"))


def test_a_hand_edit_that_breaks_the_checksum_is_caught(tmp_path: Path) -> None:
    path = save_profiles(two(), tmp_path)
    doc = json.loads(path.read_text())
    doc["profiles"]["openai"]["rpm"] = 99
    path.write_text(json.dumps(doc))
    loaded = load_profiles(tmp_path, env={})
    assert "checksum" in loaded.notices[0]


def test_a_file_without_checksum_written_by_hand_is_accepted(tmp_path: Path) -> None:
    doc = {"format": "desktop-queue.profiles", "schema_version": 1, "profiles": {"mine": {"base_url": "http://h:1/v1"}}}
    write(tmp_path / "profiles.json", doc)
    assert load_profiles(tmp_path).names() == ["mine"]


def test_a_newer_file_is_refused_and_never_overwritten(tmp_path: Path) -> None:
    doc = {"format": "desktop-queue.profiles", "schema_version": 7, "profiles": {}}
    write(tmp_path / "profiles.json", doc)
    before = (tmp_path / "profiles.json").read_bytes()
    with pytest.raises(NewerProfileFile, match="newer"):
        load_profiles(tmp_path)
    with pytest.raises(NewerProfileFile):
        save_profiles(two(), tmp_path)
    assert (tmp_path / "profiles.json").read_bytes() == before


def test_without_a_file_the_environment_is_the_fallback_profile(tmp_path: Path) -> None:
    assert load_profiles(tmp_path, env={}).source == SOURCE_NONE
    found = load_profiles(tmp_path, env={"OPENAI_API_KEY": "x"})
    assert found.source == SOURCE_ENVIRONMENT and found.configured
    assert found.profiles == (ProfileConfig(name="openai"),)


def test_env_key_stands_in_only_for_openais_own_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    assert OPENAI.openai_profile().env_key and ProfileConfig().openai_profile().env_key
    assert not OLLAMA.openai_profile().env_key
    assert resolve_api_key("openai", env=True).source == "environment"
    assert resolve_api_key("ollama", env=OLLAMA.openai_profile().env_key).source == "none"


def test_a_profiles_own_variable_is_read_for_that_profile_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no keyring can hold a key: ``DESKTOP_QUEUE_API_KEY_<NAME>``, before OPENAI_API_KEY."""
    from desktop_queue.providers.openai_compat import profile_key_variable

    assert profile_key_variable("my-proxy.2") == "DESKTOP_QUEUE_API_KEY_MY_PROXY_2"
    monkeypatch.setenv("DESKTOP_QUEUE_API_KEY_OLLAMA", CANARY_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    found = resolve_api_key("ollama", env=OLLAMA.openai_profile().env_key)
    assert (found.key, found.source, found.variable) == (CANARY_KEY, "environment", "DESKTOP_QUEUE_API_KEY_OLLAMA")
    assert resolve_api_key("other", env=False).source == "none"  # another profile's variable is not its own
    assert resolve_api_key("openai", env=True).variable == "OPENAI_API_KEY"
    monkeypatch.setenv("DESKTOP_QUEUE_API_KEY_OPENAI", "sk-mine")
    assert resolve_api_key("openai", env=True).key == "sk-mine"  # the profile's own first
    assert CANARY_KEY not in repr(found)


def test_names_are_checked_and_unique() -> None:
    profiles = two()
    with pytest.raises(InvalidInput, match="already exists"):
        profiles.with_profile(ProfileConfig(name="ollama"), replace_name="openai")
    with pytest.raises(InvalidInput, match="not usable"):
        profiles.with_profile(ProfileConfig(name="has space"))
    renamed = profiles.with_profile(ProfileConfig(name="work"), replace_name="openai")
    assert renamed.names() == ["work", "ollama"] and renamed.default_name() == "work"
    assert profiles.without("openai").default_name() == "ollama"
    assert profiles.unique_name("ollama") == "ollama-2"
    with pytest.raises(InvalidInput, match="no profile named"):
        profiles.without("nope")


def test_legacy_qsettings_values_migrate_to_a_profile() -> None:
    assert migrate_legacy({}) is None
    assert migrate_legacy({"base_url": "", "model": "", "rpm": 0}) is None
    found = migrate_legacy({"base_url": "http://127.0.0.1:8080/v1", "model": "m", "rpm": "30", "budget_usd_per_day": 2})
    assert found == ProfileConfig(base_url="http://127.0.0.1:8080/v1", model="m", rpm=30.0, budget_usd_per_day=2.0)


def test_presets_cover_openai_and_the_local_servers() -> None:
    urls = {p.label: p.config.base_url for p in PRESETS}
    assert urls == {
        "OpenAI": "https://api.openai.com/v1",
        "Ollama": "http://localhost:11434/v1",
        "llama.cpp server": "http://localhost:8080/v1",
        "LM Studio": "http://localhost:1234/v1",
    }
    assert [p.config.require_key for p in PRESETS] == [True, False, False, False]


# ---------------------------------------------------------------------- routing jobs to their profile


def context() -> RunContext:
    return RunContext(job_id="job-1", attempt=1, idempotency_key="key-1", heartbeat=lambda: True)


@pytest.fixture
def second() -> Any:
    fake = FakeOpenAI(api_key=None)  # a local server: any key, or none
    fake.start()
    yield fake
    fake.stop()


def test_each_job_runs_on_the_profile_its_input_names(
    server: FakeOpenAI, second: FakeOpenAI, memory_keyring: MemoryKeyring
) -> None:
    memory_keyring.set_password(KEYRING_SERVICE, "cloud", CANARY_KEY)
    cloud = ProfileConfig(name="cloud", base_url=server.url, model="model-a")
    local = ProfileConfig(name="local", base_url=second.url, model="model-b", require_key=False, concurrency=1)
    providers, flow = build(ProfileSet((cloud, local), "cloud"), FakeClock(), plugins=False)
    chat = providers["openai.chat"]
    assert isinstance(chat, ProfileRouter) and flow.profiles() == ["cloud", "local"]
    assert chat.run(JobView({"prompt": "hi"}), context()).ok
    assert chat.run(JobView({"prompt": "hi", "profile": "local"}), context()).ok
    assert server.count("chat") == 1 and second.count("chat") == 1
    assert server.of("chat")[0].body["model"] == "model-a" and second.of("chat")[0].body["model"] == "model-b"
    with pytest.raises(InvalidInput, match="unknown profile 'nope'.*cloud, local"):
        chat.validate({"prompt": "hi", "profile": "nope"})
    gone = chat.run(JobView({"prompt": "hi", "profile": "nope"}), context())
    assert not gone.ok and gone.error_class == "fatal" and "unknown profile" in (gone.message or "")
    # flow control counts each job against its own profile's limits
    job = {"id": "a", "kind": "openai.chat", "input": {"prompt": "x", "profile": "local"}}
    assert flow.accept(job)
    flow.on_start(job)
    assert flow.waiting_reason(
        {"id": "b", "kind": "openai.chat", "state": "queued", "input": {"profile": "local"}}
    ) == (WAITING_CONCURRENCY)
    assert flow.waiting_reason({"id": "c", "kind": "openai.chat", "state": "queued", "input": {}}) is None


def test_a_profile_without_key_holds_only_its_own_jobs(server: FakeOpenAI, second: FakeOpenAI) -> None:
    cloud = ProfileConfig(name="cloud", base_url=server.url)  # no key anywhere
    local = ProfileConfig(name="local", base_url=second.url, require_key=False)
    providers, flow = build([cloud, local], FakeClock(), plugins=False)
    assert providers["openai.chat"].unavailable_reason() is None  # type: ignore[attr-defined]
    held = flow.waiting_reason({"id": "a", "kind": "openai.chat", "state": "queued", "input": {}})
    assert held is not None and "no API key for profile cloud" in held
    assert (
        flow.waiting_reason({"id": "b", "kind": "openai.chat", "state": "queued", "input": {"profile": "local"}})
        is None
    )
    assert not flow.accept({"id": "a", "kind": "openai.chat", "input": {"prompt": "x"}})


def test_reconfigure_swaps_the_profiles_of_running_dicts(server: FakeOpenAI, second: FakeOpenAI) -> None:
    providers, flow = build([ProfileConfig(name="cloud", base_url=server.url)], FakeClock(), plugins=False)
    driver_copy = dict(providers)
    local = ProfileConfig(name="local", base_url=second.url, require_key=False)
    reconfigure([providers, driver_copy], flow, ProfileSet((local,), "local"))
    assert providers["openai.chat"].profile.name == "local"  # type: ignore[attr-defined]
    assert driver_copy["openai.chat"] is providers["openai.chat"]
    assert "local" in flow.profiles()
    job = {"id": "x", "kind": "openai.chat", "input": {"prompt": "p"}}
    assert flow.accept(job)  # unnamed jobs now count against the new default


# ---------------------------------------------------------------------- the exact failure of a connection test


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def failure(base_url: str, key: str | None = CANARY_KEY, **profile: Any) -> str:
    provider = make_providers(ProfileConfig(base_url=base_url, **profile).openai_profile(), api_key=key)["openai.chat"]
    try:
        with pytest.raises(InvalidInput) as caught:
            provider.test_connection()
    finally:
        provider.close()
    text = str(caught.value)
    assert CANARY_KEY not in text
    return text


def test_refused_is_named(tmp_path: Path) -> None:
    port = free_port()
    assert failure(f"http://127.0.0.1:{port}/v1").startswith(f"connection refused at 127.0.0.1:{port}")


def test_dns_is_named() -> None:
    text = failure("http://no-such-host.invalid/v1")
    assert text.startswith("DNS: the host name 'no-such-host.invalid' does not resolve"), text


def test_tls_to_a_plain_http_server_is_named(server: FakeOpenAI) -> None:
    text = failure(server.url.replace("http://", "https://"))
    assert text.startswith("TLS handshake with 127.0.0.1") and "http://" in text, text


def test_401_and_404_are_named(server: FakeOpenAI) -> None:
    assert failure(server.url, key="sk-wrong-0123456789abcdef").startswith("HTTP 401 from 127.0.0.1: the API key")
    root = server.url.removesuffix("/v1")
    text = failure(root + "/v1/api")
    assert text.startswith("HTTP 404 at GET ") and "/v1/api/models" in text and "ends in /v1" in text, text


def test_a_job_naming_a_profile_not_known_here_waits_instead_of_failing(server: FakeOpenAI, second: FakeOpenAI) -> None:
    providers, flow = build([ProfileConfig(name="cloud", base_url=server.url)], FakeClock(), plugins=False)
    job = {"id": "u", "kind": "openai.chat", "state": "queued", "input": {"prompt": "x", "profile": "lab"}}
    assert not flow.accept(job)
    assert flow.waiting_reason(job) == "waiting: profile lab is not configured (add it in Preferences → Providers)"
    assert flow.accept({"id": "d", "kind": "demo", "input": {}})  # other kinds are not concerned
    # another process added "lab": once this one reads it, the job runs
    lab = ProfileConfig(name="lab", base_url=second.url, require_key=False)
    reconfigure([providers], flow, ProfileSet((ProfileConfig(name="cloud", base_url=server.url), lab), "cloud"))
    assert flow.waiting_reason(job) is None and flow.accept(job)
