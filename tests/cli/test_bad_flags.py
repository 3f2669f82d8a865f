"""Numbers and paths on the command line that make no sense are refused with exit code 2.

Each of these used to be taken as given: ``list --limit -1`` sliced off the oldest
job, ``--data-dir ''`` fell back to the default data dir, ``work --max-seconds -5``
leased jobs before its first look at the clock, and ``float()`` lets ``nan`` through
every ``<= 0`` check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import Cli, Run
from .test_cli import FAST, stored_jobs

USAGE = 2


def refused(run: Run, flag: str) -> str:
    """A usage error naming ``flag`` on its last line, without a traceback."""
    assert run.code == USAGE, (run.code, run.out, run.err)
    assert "Traceback" not in run.err
    line = run.err_lines[-1]
    assert line.startswith("desktop-queue") and "error:" in line, line
    assert flag in line, line
    return line


@pytest.mark.parametrize("limit", ["-1", "0", "-100", "two"])
def test_list_limit_must_be_at_least_one(dq: Cli, limit: str) -> None:
    for i in range(3):
        dq.submit({**FAST, "prompt": f"job {i}"})

    run = dq.run("list", "--limit", limit, "--json")

    refused(run, "--limit")
    assert run.out == ""


def test_list_limit_keeps_the_newest(dq: Cli) -> None:
    ids = [dq.submit({**FAST, "prompt": f"job {i}"})["id"] for i in range(3)]

    assert [j["id"] for j in dq.jobs("--limit", "2")] == ids[:0:-1]


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_data_dir_is_refused_not_replaced_by_the_default(
    dq: Cli, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = Path(os.environ["DESKTOP_QUEUE_DATA_DIR"])
    monkeypatch.chdir(tmp_path)  # a blank name taken as given would be a directory here

    run = dq.run("--data-dir", value, "submit", "demo", "--input", json.dumps(FAST))

    refused(run, "--data-dir")
    assert not default.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert stored_jobs(dq.data_dir) == []


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-seconds", "-5"),
        ("--max-seconds", "0"),
        ("--max-seconds", "nan"),
        ("--concurrency", "0"),
        ("--concurrency", "-2"),
        ("--concurrency", "1.5"),
        ("--provider-concurrency", "0"),
        ("--rpm", "-1"),
        ("--rpm", "nan"),
        ("--tpm", "0"),
        ("--tpm", "inf"),
        ("--lease-s", "0"),
        ("--lease-s", "nan"),
        ("--attempt-timeout", "-3"),
        ("--attempt-timeout", "inf"),
        ("--budget-usd-per-day", "0"),
        ("--budget-usd-per-month", "nan"),
        ("--budget-tokens-per-day", "-10"),
        ("--budget-tokens-per-month", "0"),
    ],
)
def test_work_refuses_a_number_that_makes_no_sense(dq: Cli, flag: str, value: str) -> None:
    dq.submit(FAST)

    # --until-idle bounds the run should the flag ever be taken again
    run = dq.run("work", "--until-idle", flag, value)

    line = refused(run, flag)
    assert value.strip() in line
    [job] = stored_jobs(dq.data_dir)
    assert (job.state, job.total_attempts) == ("queued", 0)


def test_work_with_negative_max_seconds_runs_nothing(dq: Cli) -> None:
    """The case from the drill, through the real console entry."""
    job = dq.submit(FAST)

    run = dq.sub("work", "--max-seconds", "-5")

    refused(run, "--max-seconds")
    [stored] = stored_jobs(dq.data_dir)
    assert stored.id == job["id"]
    assert (stored.state, stored.total_attempts) == ("queued", 0)
    assert [e.type for e in stored.events] == ["submitted"]
