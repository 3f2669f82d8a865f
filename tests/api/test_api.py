"""The local API over real HTTP: token, every route, the CLI's error meanings, the OpenAPI document."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from api_helpers import Client, Env

from desktop_queue.api.token import load_or_create_token, token_path
from desktop_queue.core import ErrorClass, Outcome
from desktop_queue.core.queue import MAX_INPUT_BYTES, MAX_INTERACTIVE_WAITING

ROUTES = [
    ("POST", "/jobs", {"kind": "demo", "input": {"prompt": "x"}}),
    ("GET", "/jobs", None),
    ("GET", "/jobs/abcd", None),
    ("GET", "/dead", None),
    ("POST", "/jobs/abcd/retry", None),
    ("POST", "/jobs/abcd/cancel", None),
    ("POST", "/jobs/abcd/replay", None),
    ("GET", "/stats", None),
    ("GET", "/schedules", None),
]


def submit(client: Client, **fields: Any) -> Any:
    body = {"kind": "demo", "input": {"prompt": "hello"}, **fields}
    return client.call("POST", "/jobs", body)


# ---------------------------------------------------------------------- the token


def test_token_is_made_once_private_and_in_the_xdg_config_dir(isolated_profile: Path) -> None:
    token = load_or_create_token()
    path = token_path()
    assert path == isolated_profile / "config" / "desktop-queue" / "api-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32 and path.read_text().strip() == token
    assert load_or_create_token() == token  # the same on every later start


def test_token_follows_desktop_queue_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKTOP_QUEUE_CONFIG_DIR", str(tmp_path / "elsewhere"))
    token = load_or_create_token()
    assert (tmp_path / "elsewhere" / "api-token").read_text().strip() == token


def test_a_readable_token_file_is_made_private(isolated_profile: Path) -> None:
    load_or_create_token()
    os.chmod(token_path(), 0o644)
    load_or_create_token()
    assert stat.S_IMODE(token_path().stat().st_mode) == 0o600


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_every_route_needs_the_token(env: Env, method: str, path: str, body: Any) -> None:
    for token in (None, "wrong-token", env.token[:-1]):
        reply = env.client.call(method, path, body, token=token)
        assert reply.status == 401, (token, reply)
        assert reply.body["error"] == "unauthorized"
        assert reply.headers["www-authenticate"] == "Bearer"
    assert env.queue.list() == []  # nothing was submitted without it


def test_basic_auth_is_not_a_bearer_token(env: Env) -> None:
    reply = env.client.call("GET", "/jobs", token=None, headers={"Authorization": f"Basic {env.token}"})
    assert reply.status == 401


# ---------------------------------------------------------------------- submit


def test_submit_creates_a_job_and_a_second_time_returns_it(env: Env) -> None:
    first = submit(env.client, title="My job", priority="interactive", max_attempts=3, key="k-1")
    assert first.status == 201
    job = first.body
    assert (job["state"], job["title"], job["priority"], job["max_attempts"]) == ("queued", "My job", "interactive", 3)
    assert job["idempotency_key"] == "k-1" and job["duplicate"] is False
    assert [e["type"] for e in job["events"]] == ["submitted"]
    assert job["events"][0]["actor"] == "api"
    again = submit(env.client, title="My job", priority="interactive", max_attempts=3, key="k-1")
    assert again.status == 200 and again.body["duplicate"] is True and again.body["id"] == job["id"]
    assert len(env.queue.list()) == 1


def test_submit_without_a_title_is_named_by_its_prompt(env: Env) -> None:
    reply = submit(env.client, input={"prompt": "Summarise the meeting notes"})
    assert reply.body["title"] == "Summarise the meeting notes"


def test_a_duplicate_of_a_succeeded_job_carries_its_result(env: Env) -> None:
    job = submit(env.client).body
    lease = env.queue.lease("w")
    assert lease is not None
    env.queue.complete(lease, {"text": "done"})
    again = submit(env.client)
    assert again.status == 200 and again.body["duplicate"] is True and again.body["result"] == {"text": "done"}
    assert again.body["id"] == job["id"]


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"kind": "nope"}, 400, "invalid_input"),  # unknown kind: the CLI's exit 2
        ({"input": {"prompt": ""}}, 400, "invalid_input"),  # the provider's validation
        ({"max_attempts": 0}, 400, "invalid_input"),
        ({"max_attempts": 101}, 400, "invalid_input"),
        ({"key": " "}, 400, "invalid_input"),
        ({"priority": "urgent"}, 422, "invalid_request"),  # not in the schema
        ({"max_attempts": "three"}, 422, "invalid_request"),
        ({"colour": "red"}, 422, "invalid_request"),  # an unknown field is refused, not ignored
    ],
)
def test_submit_errors_mean_what_the_cli_exit_codes_mean(
    env: Env, fields: dict[str, Any], status: int, code: str
) -> None:
    reply = submit(env.client, **fields)
    assert reply.status == status, reply
    assert reply.body["error"] == code and reply.body["message"]
    assert env.queue.list() == []


def test_submit_without_input_or_with_a_broken_body_is_422(env: Env) -> None:
    reply = env.client.call("POST", "/jobs", {"kind": "demo"})
    assert reply.status == 422 and "input" in reply.body["message"]
    reply = env.client.call("POST", "/jobs", raw=b'{"kind": "demo", "input": ')
    assert reply.status == 422 and reply.body["error"] == "invalid_request"


def test_a_broken_or_unlabelled_body_is_said_for_people(env: Env) -> None:
    """ "1: JSON decode error" for a broken body, and pydantic's "Input should be a valid
    dictionary or object to extract fields from" for one sent without a JSON content type."""
    reply = env.client.call("POST", "/jobs", raw=b"{not json")
    assert reply.body["message"] == (
        "the request body is not valid JSON: Expecting property name enclosed in double quotes at character 1"
    )
    for raw, headers in ((b"[1, 2]", None), (b'{"kind": "demo", "input": {}}', {"Content-Type": "text/plain"})):
        reply = env.client.call("POST", "/jobs", raw=raw, headers=headers)
        assert reply.status == 422
        assert reply.body["message"] == (
            "the request body must be a JSON object, sent with Content-Type: application/json"
        ), reply.body


def test_submit_of_a_key_held_by_another_input_is_a_conflict(env: Env) -> None:
    assert submit(env.client, key="same").status == 201
    reply = submit(env.client, key="same", input={"prompt": "other"})
    assert reply.status == 409 and reply.body["error"] == "key_conflict"


def test_a_too_large_input_is_refused(env: Env) -> None:
    big = {"prompt": "x" * (MAX_INPUT_BYTES + 10)}
    reply = submit(env.client, input=big)
    assert reply.status == 413 and reply.body["error"] == "input_too_large"
    huge = b'{"kind": "demo", "input": "' + b"x" * (3 * MAX_INPUT_BYTES) + b'"}'
    reply = env.client.call("POST", "/jobs", raw=huge)
    assert reply.status == 413
    assert env.queue.list() == []


def test_a_full_interactive_lane_is_429(env: Env) -> None:
    for n in range(MAX_INTERACTIVE_WAITING):
        assert submit(env.client, priority="interactive", input={"prompt": f"p{n}"}).status == 201
    reply = submit(env.client, priority="interactive", input={"prompt": "one more"})
    assert reply.status == 429 and reply.body["error"] == "queue_full" and reply.headers["retry-after"]


# ---------------------------------------------------------------------- reading


def test_list_filters_by_state_and_limits(env: Env) -> None:
    ids = [submit(env.client, input={"prompt": f"p{n}"}).body["id"] for n in range(3)]
    env.queue.cancel(ids[0])
    listed = env.client.call("GET", "/jobs")
    assert listed.status == 200 and [j["id"] for j in listed.body] == ids[::-1]
    assert "input" not in listed.body[0] and "events" not in listed.body[0]
    queued = env.client.call("GET", "/jobs?state=queued")
    assert {j["id"] for j in queued.body} == set(ids[1:])
    assert [j["id"] for j in env.client.call("GET", "/jobs?state=cancelled").body] == [ids[0]]
    assert [j["id"] for j in env.client.call("GET", "/jobs?limit=1").body] == [ids[2]]
    for bad in ("/jobs?state=stuck", "/jobs?limit=0", "/jobs?limit=x"):
        reply = env.client.call("GET", bad)
        assert reply.status == 422 and reply.body["error"] == "invalid_request", bad


def test_show_has_the_events_and_the_result(env: Env) -> None:
    job = submit(env.client).body
    lease = env.queue.lease("w")
    assert lease is not None
    env.queue.complete(lease, {"text": "the answer"})
    shown = env.client.call("GET", f"/jobs/{job['id']}")
    assert shown.status == 200 and shown.body["state"] == "succeeded"
    assert [e["type"] for e in shown.body["events"]] == ["submitted", "leased", "succeeded"]
    assert shown.body["result"] == {"text": "the answer"}
    assert env.client.call("GET", f"/jobs/{job['id'][:6]}").body["id"] == job["id"]  # a unique prefix, as the CLI


def test_an_unknown_job_is_404_on_every_job_route(env: Env) -> None:
    for method, path in (
        ("GET", "/jobs/ffffffff00"),
        ("POST", "/jobs/ffffffff00/cancel"),
        ("POST", "/jobs/ffffffff00/retry"),
        ("POST", "/jobs/ffffffff00/replay"),
    ):
        reply = env.client.call(method, path)
        assert reply.status == 404 and reply.body["error"] == "no_such_job", path


def test_dead_lists_the_dead_letters(env: Env) -> None:
    job = submit(env.client).body
    submit(env.client, input={"prompt": "alive"})
    lease = env.queue.lease("w")
    assert lease is not None and lease.job_id == job["id"]
    env.queue.fail(lease, Outcome.failure(ErrorClass.FATAL, "demo: refused"))
    dead = env.client.call("GET", "/dead")
    assert dead.status == 200 and [j["id"] for j in dead.body] == [job["id"]]
    assert dead.body[0]["last_error"]["class"] == "fatal"
    env.queue.resolve(job["id"])
    assert env.client.call("GET", "/dead").body == []  # a resolved dead letter waits for nobody


def test_stats_counts_per_state(env: Env) -> None:
    submit(env.client)
    reply = env.client.call("GET", "/stats")
    assert reply.status == 200 and reply.body["counts"]["queued"] == 1 and reply.body["jobs"] == 1


def test_schedules_are_what_schedule_list_prints(env: Env) -> None:
    from desktop_queue.core.schedules import ScheduleBook, new_schedule

    assert env.client.call("GET", "/schedules").body == []
    book = ScheduleBook(env.queue.data_dir, env.queue.clock.now)
    book.add(new_schedule("hourly", "0 * * * *", "demo", {"prompt": "digest"}, now=env.queue.clock.now(), tz="UTC"))
    book.close()
    [row] = env.client.call("GET", "/schedules").body
    assert (row["name"], row["cron"], row["paused"]) == ("hourly", "0 * * * *", False)
    assert row["next_run"].endswith("Z") or row["next_run"].endswith("+00:00")
    path = env.queue.data_dir / "schedules.json"
    path.write_text(json.dumps({"format": "desktop-queue-schedules", "schema_version": 99, "schedules": []}))
    reply = env.client.call("GET", "/schedules")
    assert reply.status == 503 and reply.body["error"] == "store_unavailable" and "newer" in reply.body["message"]


# ---------------------------------------------------------------------- verbs


def test_cancel_retry_replay_and_what_a_state_does_not_allow(env: Env) -> None:
    job = submit(env.client).body
    replay = env.client.call("POST", f"/jobs/{job['id']}/replay")
    assert replay.status == 409 and replay.body["error"] == "not_allowed"  # queued: not finished
    retry = env.client.call("POST", f"/jobs/{job['id']}/retry")
    assert retry.status == 409 and retry.body["error"] == "not_allowed"
    cancelled = env.client.call("POST", f"/jobs/{job['id']}/cancel")
    assert cancelled.status == 200 and cancelled.body["state"] == "cancelled"
    assert cancelled.body["events"][-1]["actor"] == "api"
    again = env.client.call("POST", f"/jobs/{job['id']}/cancel")
    assert again.status == 409 and again.body["error"] == "not_allowed"
    retried = env.client.call("POST", f"/jobs/{job['id']}/retry")
    assert retried.status == 200 and retried.body["state"] == "queued" and retried.body["run"] == 2
    env.queue.cancel(job["id"])
    replayed = env.client.call("POST", f"/jobs/{job['id']}/replay", {"input": {"prompt": "edited"}})
    assert replayed.status == 201
    assert replayed.body["replay_of"] == job["id"] and replayed.body["input"] == {"prompt": "edited"}
    assert env.queue.get(job["id"]).replayed_as == (replayed.body["id"],)
    plain = env.client.call("POST", f"/jobs/{job['id']}/replay")
    assert plain.status == 201 and plain.body["input"] == {"prompt": "hello"}
    bad = env.client.call("POST", f"/jobs/{job['id']}/replay", {"input": {"prompt": ""}})
    assert bad.status == 400 and bad.body["error"] == "invalid_input"


# ---------------------------------------------------------------------- the OpenAPI document


def test_openapi_document_describes_every_route(env: Env) -> None:
    reply = env.client.call("GET", "/openapi.json", token=None)
    assert reply.status == 200
    doc = reply.body
    assert doc["openapi"].startswith("3.") and doc["info"]["title"]
    paths = doc["paths"]
    assert set(paths) >= {
        "/jobs",
        "/jobs/{job_id}",
        "/dead",
        "/jobs/{job_id}/retry",
        "/jobs/{job_id}/cancel",
        "/jobs/{job_id}/replay",
        "/stats",
        "/schedules",
        "/webhooks/{profile}",
    }
    assert set(paths["/jobs"]) == {"get", "post"}
    schemes = doc["components"]["securitySchemes"]
    (name,) = [n for n, s in schemes.items() if s.get("type") == "http" and s.get("scheme") == "bearer"]
    assert paths["/stats"]["get"]["security"] == [{name: []}]
    assert "security" not in paths["/webhooks/{profile}"]["post"]  # signed instead
    submit_schema = doc["components"]["schemas"]["SubmitBody"]
    assert set(submit_schema["required"]) == {"kind", "input"}
    assert submit_schema["properties"]["priority"]["enum"] == ["interactive", "background"]
    # every reference resolves
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        node: Any = doc
        for key in ref.removeprefix("#/").split("/"):
            node = node[key]


# ---------------------------------------------------------------------- serve, as a user runs it


def test_serve_in_a_subprocess_takes_a_job_with_the_token(tmp_path: Path) -> None:
    env = {**os.environ, "DESKTOP_QUEUE_CONFIG_DIR": str(tmp_path / "config"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(tmp_path / "data"), "serve", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "serving the Desktop Queue API on http://127.0.0.1:PORT ..."
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        token = (tmp_path / "config" / "api-token").read_text().strip()
        assert token not in line  # the token is never printed
        client = Client(port, token)
        assert client.call("GET", "/jobs", token=None).status == 401
        made = client.call("POST", "/jobs", {"kind": "demo", "input": {"prompt": "from curl"}})
        assert made.status == 201 and made.body["state"] == "queued"
        assert [j["id"] for j in client.call("GET", "/jobs").body] == [made.body["id"]]
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0  # SIGTERM is a graceful stop
    listed = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "--data-dir", str(tmp_path / "data"), "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert [j["title"] for j in json.loads(listed.stdout)] == ["from curl"]


def test_serve_on_a_taken_port_says_so(tmp_path: Path, env: Env) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "desktop_queue",
            "--data-dir",
            str(tmp_path / "d2"),
            "serve",
            "--port",
            str(env.server.port),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "DESKTOP_QUEUE_CONFIG_DIR": str(tmp_path / "config")},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{env.server.port}" in proc.stderr


@pytest.mark.parametrize("port", ["-1", "70000", "http"])
def test_serve_refuses_a_bad_port(tmp_path: Path, port: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "desktop_queue", "serve", "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "--port" in proc.stderr
