"""The scripting contract of shared/DESIGN.md section 5: every command, its output, its exit codes.

Exit codes are checked as literals (0 done, 1 failed, 2 usage error, 3 no such job,
4 not allowed in the job's state): they are the contract, not an implementation detail.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from desktop_queue.core import Queue
from desktop_queue.core.errors import StoreError
from desktop_queue.providers import discover

from .conftest import Cli, Run

OK, FAILED, USAGE, NO_JOB, NOT_ALLOWED = 0, 1, 2, 3, 4

FAST = {"prompt": "a haiku about queues", "duration_s": 0.05}


def one_clear_line(run: Run) -> str:
    """The error contract: exactly one line on stderr, from the program, without a traceback."""
    assert len(run.err_lines) == 1, run.err
    line = run.err_lines[0]
    assert line.startswith("desktop-queue: "), line
    assert "Traceback" not in run.err
    return line


def stored_jobs(data_dir: Path) -> list[Any]:
    """What the store really holds (read directly, not through the command under test)."""
    if not (data_dir / "store").exists():
        return []
    with Queue.open(data_dir, discover()) as queue:
        return queue.list(with_events=True)


# ---------------------------------------------------------------------- submit


class TestSubmit:
    def test_input_title_priority_and_attempts_are_stored_and_printed(self, dq: Cli) -> None:
        run = dq.sub(
            "submit",
            "demo",
            "--input",
            json.dumps(FAST),
            "--title",
            "Haiku",
            "--priority",
            "interactive",
            "--max-attempts",
            "3",
            "--json",
        )

        assert run.code == OK, run.err
        doc = run.json()
        assert doc["duplicate"] is False
        assert doc["state"] == "queued"
        assert doc["kind"] == "demo"
        assert doc["title"] == "Haiku"
        assert doc["priority"] == "interactive"
        assert doc["max_attempts"] == 3
        assert doc["attempts"] == 0
        assert doc["input"] == FAST
        assert [(e["type"], e["actor"]) for e in doc["events"]] == [("submitted", "cli")]
        [job] = stored_jobs(dq.data_dir)
        assert (job.id, job.title, job.priority, job.max_attempts) == (doc["id"], "Haiku", "interactive", 3)

    def test_input_file(self, dq: Cli, tmp_path: Path) -> None:
        path = tmp_path / "input.json"
        path.write_text(json.dumps({"prompt": "from a file", "duration_s": 0.05}), encoding="utf-8")

        run = dq.run("submit", "demo", "--input-file", str(path), "--json")

        assert run.code == OK, run.err
        assert run.json()["input"] == {"prompt": "from a file", "duration_s": 0.05}
        assert [j.input for j in stored_jobs(dq.data_dir)] == [{"prompt": "from a file", "duration_s": 0.05}]

    def test_dash_reads_standard_input(self, dq: Cli) -> None:
        run = dq.sub("submit", "demo", "-", "--json", stdin=json.dumps({"prompt": "piped in"}))

        assert run.code == OK, run.err
        assert run.json()["input"] == {"prompt": "piped in"}
        assert [j.input for j in stored_jobs(dq.data_dir)] == [{"prompt": "piped in"}]

    def test_caller_key_is_the_idempotency_key(self, dq: Cli) -> None:
        doc = dq.submit(FAST, "--key", "report-2024-06")

        assert doc["idempotency_key"] == "report-2024-06"

    def test_same_input_twice_is_a_duplicate_with_the_same_id(self, dq: Cli) -> None:
        first = dq.sub("submit", "demo", "--input", json.dumps(FAST), "--json")
        second = dq.sub("submit", "demo", "--input", json.dumps(FAST), "--json")

        assert (first.code, second.code) == (OK, OK), first.err + second.err
        assert first.json()["duplicate"] is False
        assert second.json()["duplicate"] is True
        assert second.json()["id"] == first.json()["id"]
        assert len(stored_jobs(dq.data_dir)) == 1

    def test_same_caller_key_and_input_is_a_duplicate(self, dq: Cli) -> None:
        first = dq.submit(FAST, "--key", "k-1")
        second = dq.submit(FAST, "--key", "k-1")

        assert second["duplicate"] is True
        assert second["id"] == first["id"]

    def test_plain_output_says_submitted_then_duplicate(self, dq: Cli) -> None:
        first = dq.run("submit", "demo", "--input", json.dumps(FAST))
        second = dq.run("submit", "demo", "--input", json.dumps(FAST))

        assert (first.code, second.code) == (OK, OK)
        [job] = stored_jobs(dq.data_dir)
        assert first.out.startswith(f"submitted {job.id}")
        assert second.out.startswith(f"duplicate: job {job.id}")

    def test_same_key_with_a_different_input_fails_with_exit_1(self, dq: Cli) -> None:
        first = dq.submit(FAST, "--key", "shared-key")

        run = dq.sub("submit", "demo", "--input", json.dumps({"prompt": "something else"}), "--key", "shared-key")

        assert run.code == FAILED
        line = one_clear_line(run)
        assert first["id"] in line and "different input" in line
        assert [j.id for j in stored_jobs(dq.data_dir)] == [first["id"]]

    def test_default_data_dir_comes_from_the_environment(self, dq: Cli, capsys: pytest.CaptureFixture[str]) -> None:
        from desktop_queue.cli import main

        code = main(["submit", "demo", "--input", json.dumps(FAST), "--json"])

        assert code == OK
        job_id = json.loads(capsys.readouterr().out)["id"]
        assert [j.id for j in stored_jobs(Path(os.environ["DESKTOP_QUEUE_DATA_DIR"]))] == [job_id]
        assert stored_jobs(dq.data_dir) == []


class TestBadInput:
    def test_invalid_json_is_a_usage_error_with_one_clear_line(self, dq: Cli) -> None:
        run = dq.sub("submit", "demo", "--input", '{"prompt": "unterminated')

        assert run.code == USAGE
        line = one_clear_line(run)
        assert "--input is not valid JSON" in line
        assert run.out == ""
        assert stored_jobs(dq.data_dir) == []

    @pytest.mark.parametrize("source", ["file", "stdin"])
    def test_invalid_json_from_a_file_or_stdin(self, dq: Cli, tmp_path: Path, source: str) -> None:
        path = tmp_path / "bad.json"
        path.write_text("{not json", encoding="utf-8")

        if source == "file":
            run = dq.sub("submit", "demo", "--input-file", str(path))
        else:
            run = dq.sub("submit", "demo", "-", stdin="{not json")

        assert run.code == USAGE
        assert "not valid JSON" in one_clear_line(run)
        assert stored_jobs(dq.data_dir) == []

    def test_unknown_kind(self, dq: Cli) -> None:
        run = dq.sub("submit", "no-such-kind", "--input", json.dumps(FAST))

        assert run.code == USAGE
        line = one_clear_line(run)
        assert "unknown job kind 'no-such-kind'" in line and "demo" in line
        assert stored_jobs(dq.data_dir) == []

    def test_input_file_over_one_mib_creates_nothing(self, dq: Cli, tmp_path: Path) -> None:
        path = tmp_path / "huge.json"
        path.write_text(json.dumps({"prompt": "x" * (1 << 20)}), encoding="utf-8")

        run = dq.sub("submit", "demo", "--input-file", str(path))

        assert run.code == USAGE
        assert "1 MiB" in one_clear_line(run)
        assert stored_jobs(dq.data_dir) == []

    def test_stdin_over_one_mib_creates_nothing(self, dq: Cli) -> None:
        run = dq.sub("submit", "demo", "-", stdin=json.dumps({"prompt": "y" * ((1 << 20) + 10)}))

        assert run.code == USAGE
        assert "1 MiB" in one_clear_line(run)
        assert stored_jobs(dq.data_dir) == []

    def test_input_argument_over_one_mib_creates_nothing(self, dq: Cli) -> None:
        # in-process: one command-line argument of 1 MiB is over the kernel's limit for exec
        run = dq.run("submit", "demo", "--input", json.dumps({"prompt": "z" * (1 << 20)}))

        assert run.code == USAGE
        assert "1 MiB" in one_clear_line(run)
        assert stored_jobs(dq.data_dir) == []

    @pytest.mark.parametrize(
        ("args", "expected"),
        [
            pytest.param(["--input", '{"duration_s": 1}'], "prompt", id="demo-input-without-prompt"),
            pytest.param(["--input", '{"prompt": "p", "duration_s": -1}'], "duration_s", id="bad-duration"),
            pytest.param(["--input", "[1, 2]"], "JSON object", id="not-an-object"),
            pytest.param([], "give the input", id="no-input"),
            pytest.param(["--input-file", "/nonexistent/input.json"], "cannot read", id="missing-file"),
            pytest.param(["--input", json.dumps(FAST), "--max-attempts", "0"], "max attempts", id="zero-attempts"),
        ],
    )
    def test_unusable_input_is_a_usage_error(self, dq: Cli, args: list[str], expected: str) -> None:
        run = dq.run("submit", "demo", *args)

        assert run.code == USAGE
        assert expected in one_clear_line(run)
        assert stored_jobs(dq.data_dir) == []

    @pytest.mark.parametrize(
        "args",
        [
            pytest.param(["submit", "demo", "--input", "{}", "--priority", "urgent"], id="bad-priority"),
            pytest.param(["submit", "demo", "--input", "{}", "--max-attempts", "many"], id="non-numeric-attempts"),
            pytest.param(["submit", "demo", "--input", "{}", "--input-file", "x.json"], id="two-inputs"),
            pytest.param(["list", "--state", "sleeping"], id="bad-state"),
            pytest.param(["frobnicate"], id="unknown-command"),
        ],
    )
    def test_bad_arguments_exit_2(self, dq: Cli, args: list[str]) -> None:
        run = dq.run(*args)

        assert run.code == USAGE
        assert run.err_lines[-1].startswith("desktop-queue")
        assert "error:" in run.err_lines[-1]
        assert stored_jobs(dq.data_dir) == []


# ---------------------------------------------------------------------- list and show


class TestListAndShow:
    def test_list_json_is_newest_first(self, dq: Cli) -> None:
        ids = [dq.submit({"prompt": f"job {i}"})["id"] for i in range(3)]

        listed = dq.jobs()

        assert [j["id"] for j in listed] == ids[::-1]
        assert {j["state"] for j in listed} == {"queued"}

    def test_list_filters_by_state(self, dq: Cli) -> None:
        first, middle, last = (dq.submit({"prompt": f"job {i}"})["id"] for i in range(3))
        assert dq.run("cancel", middle).code == OK

        assert [j["id"] for j in dq.jobs("--state", "cancelled")] == [middle]
        assert [j["id"] for j in dq.jobs("--state", "queued")] == [last, first]
        assert dq.jobs("--state", "dead") == []

    def test_list_plain_text(self, dq: Cli) -> None:
        empty = dq.run("list")
        job = dq.submit(FAST, "--title", "Quarterly summary")

        run = dq.run("list")

        assert (empty.code, empty.out.strip()) == (OK, "no jobs")
        assert run.code == OK
        [line] = run.out.splitlines()
        assert line.startswith(job["id"]) and "queued" in line and "Quarterly summary" in line

    def test_list_lines_up_its_columns_past_a_long_kind(self, dq: Cli) -> None:
        """ "openai.speech" (13 characters) pushed its row's attempts one column right."""
        dq.submit(FAST, "--title", "short kind")
        speech = dq.run("submit", "openai.speech", "--input", '{"input": "hello"}', "--title", "long kind")
        assert speech.code == OK, speech.err

        lines = dq.run("list").out.splitlines()

        assert len(lines) == 2
        assert len({line.index(" 0/") for line in lines}) == 1, lines

    def test_show_json_has_the_full_timeline(self, dq: Cli) -> None:
        secret_prompt = "the board meeting notes, confidential"
        job = dq.submit({"prompt": secret_prompt, "duration_s": 0.05})
        assert dq.run("cancel", job["id"]).code == OK
        assert dq.run("retry", job["id"]).code == OK

        run = dq.sub("show", job["id"], "--json")

        assert run.code == OK, run.err
        doc = run.json()
        assert doc["id"] == job["id"]
        assert doc["state"] == "queued"
        assert doc["input"] == {"prompt": secret_prompt, "duration_s": 0.05}
        assert [(e["type"], e["actor"]) for e in doc["events"]] == [
            ("submitted", "cli"),
            ("cancelled", "cli"),
            ("retried", "cli"),
        ]
        assert doc["events"][2]["detail"]["run"] == 2
        assert secret_prompt not in json.dumps(doc["events"])  # invariant 7

    def test_show_plain_text_and_id_prefix(self, dq: Cli) -> None:
        job = dq.submit(FAST, "--title", "Prefix me")

        run = dq.run("show", job["id"][:6])

        assert run.code == OK, run.err
        assert f"job       {job['id']}  Prefix me" in run.out
        assert "timeline" in run.out and "submitted" in run.out

    def test_show_says_each_event_as_the_window_does(self, dq: Cli) -> None:
        """`show` printed "lease_s=30.0", "retry_after_s=1.2109065055847168" and
        "run_after=1796610735.246": the window's words and units, not the raw detail."""
        from desktop_queue.core import Outcome

        job = dq.submit(FAST, "--title", "throttled once")
        with Queue.open(dq.data_dir, discover()) as queue:
            lease = queue.lease("render-box:4123", lease_s=30)
            assert lease is not None
            queue.fail(lease, Outcome.failure("throttled", "HTTP 429", status=429, retry_after=1.2109065055847168))
        run = dq.run("show", job["id"])
        assert run.code == OK, run.err
        lines = run.out.split("timeline\n", 1)[1].splitlines()
        leased = next(line for line in lines if " leased " in line)
        assert leased.endswith("leased by render-box (pid 4123) · lease: 30 s"), leased
        throttled = next(line for line in lines if " throttled " in line)
        assert "error class: throttled · error: HTTP 429 · status: 429" in throttled, throttled
        assert "retry after: 1.2 s" in throttled and "run after: " in throttled
        assert "_s=" not in run.out and "1796" not in run.out

    def test_show_writes_out_a_result_file_the_journal_still_holds(self, dq: Cli) -> None:
        job = dq.submit(FAST)
        with Queue.open(dq.data_dir, discover()) as queue:
            lease = queue.lease("test")
            assert lease is not None
            done = queue.complete(lease, {"text": "from the journal"})
        path = dq.data_dir / str(done.result_ref)
        assert not path.exists()  # compaction has not written it yet

        run = dq.run("show", job["id"])

        assert run.code == OK, run.err
        assert f"result    {done.result_ref}" in run.out
        assert json.loads(path.read_text())["result"] == {"text": "from the journal"}

    def test_show_on_a_full_disk_shows_the_journals_result_and_says_the_file_waits(
        self, dq: Cli, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from desktop_queue.core import results as results_module

        job = dq.submit(FAST)
        with Queue.open(dq.data_dir, discover()) as queue:
            lease = queue.lease("test")
            assert lease is not None
            queue.complete(lease, {"text": "from the journal"})

        def full(path: Path, data: bytes, **kwargs: object) -> bool:
            raise StoreError(f"could not write {path.name}: No space left on device; nothing was changed")

        monkeypatch.setattr(results_module, "atomic_write", full)
        run = dq.run("show", job["id"])

        assert run.code == OK, run.err
        assert "from the journal" in run.out
        assert one_clear_line(run).startswith(f"desktop-queue: job {job['id']}: its result file cannot be written yet")
        assert "No space left on device" in run.err


# ---------------------------------------------------------------------- verbs


class TestVerbs:
    def test_cancel_a_queued_job_then_cancel_again_is_not_allowed(self, dq: Cli) -> None:
        job = dq.submit(FAST)

        first = dq.run("cancel", job["id"], "--json")
        again = dq.sub("cancel", job["id"])

        assert first.code == OK
        assert first.json()["state"] == "cancelled"
        assert again.code == NOT_ALLOWED
        assert "cannot go from cancelled to cancelled" in one_clear_line(again)
        [stored] = stored_jobs(dq.data_dir)
        assert [e.type for e in stored.events] == ["submitted", "cancelled"]

    def test_retry_of_a_queued_job_is_not_allowed_and_changes_nothing(self, dq: Cli) -> None:
        job = dq.submit(FAST)

        run = dq.sub("retry", job["id"])

        assert run.code == NOT_ALLOWED
        one_clear_line(run)
        [stored] = stored_jobs(dq.data_dir)
        assert (stored.state, stored.run) == ("queued", 1)
        assert [e.type for e in stored.events] == ["submitted"]

    def test_retry_of_a_cancelled_job_queues_the_same_job_for_a_new_run(self, dq: Cli) -> None:
        job = dq.submit(FAST)
        dq.run("cancel", job["id"])

        run = dq.run("retry", job["id"], "--json")

        assert run.code == OK, run.err
        doc = run.json()
        assert (doc["id"], doc["state"], doc["run"], doc["attempts"]) == (job["id"], "queued", 2, 0)
        assert len(stored_jobs(dq.data_dir)) == 1

    def test_replay_of_a_queued_job_is_not_allowed(self, dq: Cli) -> None:
        job = dq.submit(FAST)

        run = dq.sub("replay", job["id"])

        assert run.code == NOT_ALLOWED
        assert "only finished jobs can be replayed" in one_clear_line(run)
        assert len(stored_jobs(dq.data_dir)) == 1

    def test_replay_creates_a_new_linked_job(self, dq: Cli) -> None:
        job = dq.submit(FAST)
        dq.run("cancel", job["id"])

        same = dq.run("replay", job["id"], "--json")
        edited = dq.run("replay", job["id"], "--input", json.dumps({"prompt": "edited"}), "--json")

        assert (same.code, edited.code) == (OK, OK), same.err + edited.err
        same_doc, edited_doc = same.json(), edited.json()
        assert same_doc["id"] != job["id"] and edited_doc["id"] not in (job["id"], same_doc["id"])
        assert same_doc["replay_of"] == edited_doc["replay_of"] == job["id"]
        assert same_doc["input"] == FAST
        assert edited_doc["input"] == {"prompt": "edited"}
        assert same_doc["idempotency_key"] != job["idempotency_key"]
        original = dq.run("show", job["id"], "--json").json()
        assert original["replayed_as"] == [same_doc["id"], edited_doc["id"]]
        assert [e["type"] for e in original["events"]][-2:] == ["replayed_as", "replayed_as"]

    def test_replay_with_invalid_json_is_a_usage_error(self, dq: Cli) -> None:
        job = dq.submit(FAST)
        dq.run("cancel", job["id"])

        run = dq.run("replay", job["id"], "--input", "{oops")

        assert run.code == USAGE
        assert "not valid JSON" in one_clear_line(run)
        assert len(stored_jobs(dq.data_dir)) == 1

    @pytest.mark.parametrize("command", ["show", "cancel", "retry", "replay"])
    def test_unknown_id_exits_3(self, dq: Cli, command: str) -> None:
        dq.submit(FAST)

        run = dq.sub(command, "0123456789")

        assert run.code == NO_JOB
        assert "no job '0123456789'" in one_clear_line(run)

    def test_too_short_a_start_of_an_id_says_how_long_it_must_be(self, dq: Cli) -> None:
        """`show 2` said "no job '2'" beside two jobs whose ids start with 2."""
        job = dq.submit(FAST)
        run = dq.run("show", job["id"][:2])
        assert run.code == NO_JOB
        assert one_clear_line(run).endswith("(the start of an id must be 4 characters or more)")
        assert dq.run("show", job["id"][:4]).code == OK


def test_every_argument_of_every_command_says_what_it_is() -> None:
    """`work --help` listed "--concurrency N" with nothing beside it, `submit --help`
    "--priority" and "--max-attempts N", and every command its bare "id"."""
    import argparse

    from desktop_queue.cli import build_parser

    bare: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.help is None:
                bare.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "desktop-queue")
    assert bare == []


# ---------------------------------------------------------------------- work and stats


class TestWorkAndStats:
    def test_work_until_idle_runs_every_job_to_completion(self, dq: Cli) -> None:
        ids = [dq.submit({"prompt": f"job {i}", "duration_s": 0.05})["id"] for i in range(3)]
        flaky = dq.submit({"prompt": "flaky", "duration_s": 0.05, "fail_times": 1, "fail_with": "retryable"})["id"]

        run = dq.sub("work", "--until-idle", "--max-seconds", "30", "--concurrency", "2", "--json")

        assert run.code == OK, run.err
        summary = run.json()
        assert summary["stopped"] == "idle"
        assert summary["clean_shutdown"] is True
        assert summary["finished"] == {"succeeded": 4} and summary["requeued"] == 1  # the flaky one failed once
        assert summary["counts"]["succeeded"] == 4
        jobs = {j.id: j for j in stored_jobs(dq.data_dir)}
        assert {jobs[i].state for i in [*ids, flaky]} == {"succeeded"}
        assert [e.type for e in jobs[flaky].events] == [
            "submitted",
            "leased",
            "retry_scheduled",
            "leased",
            "succeeded",
        ]
        shown = dq.run("show", ids[0], "--json").json()
        assert shown["result"]["provider"] == "demo" and shown["result"]["text"]

    def test_submitting_a_succeeded_input_again_returns_it_with_its_result(self, dq: Cli) -> None:
        job = dq.submit(FAST)
        assert dq.sub("work", "--until-idle", "--max-seconds", "30").code == OK

        again = dq.submit(FAST)

        assert again["duplicate"] is True
        assert (again["id"], again["state"]) == (job["id"], "succeeded")
        assert again["result"]["text"]

    def test_work_max_seconds_stops_and_gives_unfinished_work_back(self, dq: Cli) -> None:
        job = dq.submit({"prompt": "slow", "duration_s": 60})

        run = dq.sub("work", "--max-seconds", "0.5", "--json")

        assert run.code == OK, run.err
        assert run.json()["stopped"] == "time limit reached"
        [stored] = stored_jobs(dq.data_dir)
        assert stored.id == job["id"]
        assert (stored.state, stored.attempts, stored.total_attempts) == ("queued", 0, 1)
        assert [e.type for e in stored.events] == ["submitted", "leased", "released"]

    def test_work_on_an_empty_store_says_the_queue_is_empty(self, dq: Cli) -> None:
        run = dq.sub("work", "--until-idle", "--max-seconds", "30")

        assert run.code == OK, run.err
        assert run.err_lines[-1] == "desktop-queue: stopped (idle): nothing finished; queue now empty"

    def test_work_counts_a_drained_backlog_in_one_line_and_names_its_dead_letter(self, dq: Cli, tmp_path: Path) -> None:
        for i in range(6):
            dq.submit({"prompt": f"quick {i}", "duration_s": 0})
        dead = dq.submit({"prompt": "doomed", "duration_s": 0, "fail_times": 9, "fail_with": "fatal"})

        # (its own config dir: the alert rules and their history are the test's)
        run = dq.sub("work", "--until-idle", "--max-seconds", "30", env={"DESKTOP_QUEUE_CONFIG_DIR": str(tmp_path)})

        assert run.code == OK, run.err
        notices = [line for line in run.err_lines if "notice:" in line]
        assert notices == [
            "desktop-queue: notice: 6 jobs finished (demo 6)",
            f"desktop-queue: notice: job {dead['id']} (demo): dead-lettered; it waits for you in Dead letters",
        ]
        assert run.err_lines[-1] == "desktop-queue: stopped (idle): 1 dead, 6 succeeded; queue now 6 succeeded, 1 dead"

    def test_work_rejects_zero_concurrency(self, dq: Cli) -> None:
        run = dq.run("work", "--concurrency", "0", "--until-idle")

        assert run.code == USAGE
        assert "--concurrency" in run.err_lines[-1]
        assert "Traceback" not in run.err

    def test_stats_json_counts(self, dq: Cli) -> None:
        for i in range(2):
            dq.submit({"prompt": f"quick {i}", "duration_s": 0.02})
        dq.submit({"prompt": "flaky", "duration_s": 0.02, "fail_times": 1})
        dq.submit({"prompt": "fatal", "duration_s": 0.02, "fail_times": 1, "fail_with": "fatal"})
        assert dq.sub("work", "--until-idle", "--max-seconds", "30").code == OK
        dq.run("cancel", dq.submit({"prompt": "never run"})["id"])
        dq.submit({"prompt": "waiting"})

        run = dq.sub("stats", "--json")

        assert run.code == OK, run.err
        stats = run.json()
        assert stats["counts"] == {"queued": 1, "running": 0, "succeeded": 3, "dead": 1, "cancelled": 1}
        assert stats["jobs"] == 6
        assert stats["attempts"] == 5
        assert stats["retries"] == 1
        assert stats["dead_letters"] == 1
        assert stats["lease_expiries"] == 0
        assert stats["run_p50_s"] is not None and stats["run_p50_s"] >= 0.02

    def test_stats_says_durations_with_a_space_and_long_ones_as_the_window_does(self) -> None:
        """It printed "p50 0.01s" where every other line of the app says "0.4 s"."""
        from desktop_queue.cli import _stat_seconds

        assert [_stat_seconds(v) for v in (None, 0.0123, 9.994, 15.3, 400.0)] == [
            "-",
            "0.01 s",
            "9.99 s",
            "15 s",
            "7 min",
        ]

    def test_stats_of_an_empty_queue(self, dq: Cli) -> None:
        as_json = dq.run("stats", "--json")
        plain = dq.run("stats")

        assert (as_json.code, plain.code) == (OK, OK)
        assert as_json.json()["jobs"] == 0
        assert set(as_json.json()["counts"].values()) == {0}
        assert plain.out.startswith("jobs ")


def test_list_and_show_say_when_a_running_job_s_holder_stopped_renewing(dq: Cli) -> None:
    """A `work` process stopped past its lease keeps its job: `list` said only "running"."""
    import time

    from desktop_queue.core import FakeClock, Queue
    from desktop_queue.providers.demo import DemoProvider

    # leased 100 s ago for 30 s by a process that still has the queue open (this one), and
    # never renewed; the commands run in processes of their own, as they would
    with Queue.open(dq.data_dir, {"demo": DemoProvider()}, clock=FakeClock(time.time() - 100)) as queue:
        job_id = queue.submit("demo", FAST, title="Held").job.id
        assert queue.lease("render-box:4123", lease_s=30) is not None
        [line] = dq.sub("list").out.splitlines()
        shown = dq.sub("show", job_id).out
    assert line.startswith(job_id), line
    for text in (line, shown):
        found = re.search(r"running (\d+) s, lease (\d+) s overdue", text)
        assert found is not None, text
        ran, late = int(found[1]), int(found[2])
        assert 100 <= ran < 130 and ran - late in (29, 30, 31)  # (the commands take their time)
    assert "state     running " in shown


def test_list_and_show_say_why_a_due_job_waits(dq: Cli) -> None:
    """`list` said "queued" for a job held by the data dir's background switch (or a rate
    limit), where the window says why it waits."""
    background = dq.submit({"prompt": "nightly", "duration_s": 0.05}, "--title", "Nightly")
    interactive = dq.submit({"prompt": "now", "duration_s": 0.05}, "--title", "Now", "--priority", "interactive")
    assert dq.run("pause-background").code == OK
    lines = {line.split()[0]: line for line in dq.run("list").out.splitlines()}
    assert "background jobs paused (by cli)" in lines[background["id"]], lines
    assert "queued" in lines[interactive["id"]] and "paused" not in lines[interactive["id"]]
    assert "state     background jobs paused (by cli)" in dq.run("show", background["id"]).out
    assert [j["state"] for j in dq.jobs()] == ["queued", "queued"]  # (--json keeps the state)
    assert dq.run("resume-background").code == OK
    assert "paused" not in dq.run("list").out


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("list", r"desktop-queue: warning: could not start a new journal segment: disk full\n"),
        ("work", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ WARNING desktop_queue\.test: could not start .*\n"),
    ],
)
def test_a_one_shot_command_says_a_warning_as_it_says_an_error_and_a_worker_keeps_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], command: str, expected: str
) -> None:
    import logging
    import re

    from desktop_queue import cli

    def warns(args: Any) -> int:
        logging.getLogger("desktop_queue.test").warning("could not start a new journal segment: disk full")
        return 0

    monkeypatch.setitem(cli.COMMANDS, command, warns)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # (pytest's own would make basicConfig a no-op)
    capfd.readouterr()
    assert cli.main(["--data-dir", str(tmp_path), command]) == 0
    assert re.fullmatch(expected, capfd.readouterr().err), command
