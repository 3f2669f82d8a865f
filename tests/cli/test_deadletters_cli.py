"""``replay --dry-run``, ``resolve``, ``export`` and ``import``: real subprocesses."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from .conftest import Cli

OK, FAILED, USAGE, NO_JOB, NOT_ALLOWED = 0, 1, 2, 3, 4


def dead_letters(dq: Cli, *prompts: str, status: int = 401) -> list[str]:
    # titled by hand: a job submitted without a title is named by its prompt (shown in exports too)
    ids = [
        dq.submit({"prompt": p, "duration_s": 0.01, "fail_times": 9, "fail_with": status}, "--title", f"dead {i}")["id"]
        for i, p in enumerate(prompts, 1)
    ]
    run = dq.sub("work", "--until-idle", "--max-seconds", "30")
    assert run.code == OK, run.err
    return ids


def test_replay_dry_run_says_why_and_queues_nothing(dq: Cli) -> None:
    (job_id,) = dead_letters(dq, "draw a lighthouse")
    run = dq.sub("replay", job_id, "--dry-run", "--json")
    assert run.code == OK, run.err
    preview = run.json()
    assert preview["dry_run"] is True and preview["job_id"] == job_id
    assert preview["error"]["status"] == 401 and preview["error"]["class"] == "fatal"
    assert preview["verdict"] == "fail"
    assert any("HTTP 401" in f["text"] for f in preview["findings"])
    assert [j["state"] for j in dq.jobs()] == ["dead"]  # nothing was queued

    text = dq.sub("replay", job_id, "--dry-run", "--input", '{"prompt": "a lighthouse at night"}')
    assert text.code == OK, text.err
    assert "replay of " + job_id in text.out
    assert "'a lighthouse at night'" in text.out  # the new title comes from the edited prompt
    assert "nothing was queued" in text.out
    assert len(dq.jobs()) == 1

    queued = dq.submit({"prompt": "waiting"})["id"]
    refused = dq.sub("replay", queued, "--dry-run")
    assert refused.code == NOT_ALLOWED and "only finished jobs" in refused.err
    assert dq.sub("replay", "nosuchjob", "--dry-run").code == NO_JOB


def test_resolve_closes_a_dead_letter(dq: Cli) -> None:
    first, second = dead_letters(dq, "one", "two")
    run = dq.sub("resolve", first, "--note", "the key was revoked on purpose", "--json")
    assert run.code == OK, run.err
    job = run.json()
    assert job["state"] == "dead" and job["resolved_at"] is not None
    assert job["events"][-1]["type"] == "resolved"
    assert job["events"][-1]["detail"]["note"] == "the key was revoked on purpose"
    stats = dq.sub("stats", "--json").json()
    assert stats["dead_letters"] == 1 and stats["counts"]["resolved"] == 1
    again = dq.sub("resolve", first)
    assert again.code == NOT_ALLOWED and "resolved already" in again.err
    shown = dq.sub("show", first)
    assert "resolved  " in shown.out
    assert dq.sub("resolve", "nosuchjob").code == NO_JOB
    assert second in dq.sub("list", "--state", "dead").out


def test_export_csv_and_jsonl_and_import_them_back(dq: Cli, tmp_path: Path) -> None:
    dead = dead_letters(dq, "SECRETPROMPT alpha", "SECRETPROMPT beta")
    ok = dq.submit({"prompt": "fine", "duration_s": 0.01})["id"]
    assert dq.sub("work", "--until-idle", "--max-seconds", "30").code == OK

    out = tmp_path / "dead.csv"
    run = dq.sub("export", "--state", "dead", "--format", "csv", "--output", str(out))
    assert run.code == OK, run.err
    assert "exported 2 jobs" in run.err and "without their inputs" in run.err
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert {r["id"] for r in rows} == set(dead)
    assert "input" not in rows[0]
    assert json.loads(rows[0]["events"])[0]["type"] == "submitted"
    assert "SECRETPROMPT" not in out.read_text(encoding="utf-8")

    jsonl = dq.sub("export", "--with-inputs")
    assert jsonl.code == OK, jsonl.err
    docs = [json.loads(line) for line in jsonl.out.splitlines()]
    assert {d["id"] for d in docs} == {*dead, ok}
    assert all("input" in d for d in docs)

    dump = tmp_path / "all.jsonl"
    dump.write_text(jsonl.out, encoding="utf-8")
    other = Cli(tmp_path / "other", dq._capsys)
    imported = other.sub("import", str(dump), "--json")
    assert imported.code == OK, imported.err
    assert sorted(imported.json()["added"]) == sorted({*dead, ok})
    assert {j["id"]: j["state"] for j in other.jobs()} == {j["id"]: j["state"] for j in dq.jobs()}
    twice = other.sub("import", str(dump))
    assert "imported 0 jobs, skipped 3" in twice.out

    bad = other.sub("export", "--format", "xml")
    assert bad.code == USAGE
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "x"}\n', encoding="utf-8")
    refused = other.sub("import", str(broken))
    assert refused.code == USAGE and "not an exported job" in refused.err


def test_export_with_results_and_import_carry_the_answer(dq: Cli, tmp_path: Path) -> None:
    """Imported without its result, a succeeded job's `show` said "result file missing: … is
    not there any more"; now the export carries it, or the import says it did not."""
    ok = dq.submit({"prompt": "fine", "duration_s": 0.01})["id"]
    assert dq.sub("work", "--until-idle", "--max-seconds", "30").code == OK
    bare, full = tmp_path / "bare.jsonl", tmp_path / "full.jsonl"
    assert "(without their inputs or results)" in dq.sub("export", "--output", str(bare)).err
    run = dq.sub("export", "--with-inputs", "--with-results", "--output", str(full))
    assert run.code == OK and run.err.strip().endswith(f"exported 1 job to {full}"), run.err

    without = Cli(tmp_path / "without", dq._capsys).sub("import", str(bare))
    assert without.code == OK and "note: 1 succeeded job came without its result" in without.err
    other = Cli(tmp_path / "other", dq._capsys)
    imported = other.sub("import", str(full))
    assert imported.code == OK and imported.out.startswith("imported 1 job (1 result with them)"), imported.out
    shown = other.sub("show", ok)
    assert "result file missing" not in shown.out and "result (" in shown.out, shown.out
    assert other.sub("result", ok).out == dq.sub("result", ok).out
