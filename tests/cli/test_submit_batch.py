"""``desktop-queue submit KIND --batch FILE``: one job a line, in one commit, all or none.

Real subprocesses, as a script would run them; what the store holds is read directly.
"""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Cli
from .test_cli import USAGE, stored_jobs


def test_a_json_lines_file_becomes_one_job_a_line_listed_with_duplicate(dq: Cli, tmp_path: Path) -> None:
    batch = tmp_path / "jobs.jsonl"
    lines = [{"prompt": f"prompt {i}", "duration_s": 0.01} for i in range(1, 4)]
    batch.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    run = dq.sub("submit", "demo", "--batch", str(batch), "--json")
    assert run.code == 0, run.err
    printed = run.json()
    assert [p["input"] for p in printed] == lines
    assert [p["duplicate"] for p in printed] == [False, False, False]
    assert [p["title"] for p in printed] == ["prompt 1", "prompt 2", "prompt 3"]
    stored = stored_jobs(dq.data_dir)
    assert sorted(j.input["prompt"] for j in stored) == ["prompt 1", "prompt 2", "prompt 3"]
    again = dq.sub("submit", "demo", "--batch", str(batch), "--json")
    assert again.code == 0, again.err
    assert [p["duplicate"] for p in again.json()] == [True, True, True]
    assert [p["id"] for p in again.json()] == [p["id"] for p in printed]
    assert len(stored_jobs(dq.data_dir)) == 3


def test_plain_text_puts_each_line_into_the_kinds_prompt_field_over_the_template(dq: Cli, tmp_path: Path) -> None:
    batch = tmp_path / "prompts.txt"
    batch.write_text("a haiku about queues\n\n  a limerick about retries  \n", encoding="utf-8")
    run = dq.sub("submit", "demo", "--batch", str(batch), "--input", '{"prompt": "", "duration_s": 0.25}')
    assert run.code == 0, run.err
    assert "2 jobs submitted" in run.out
    inputs = sorted((j.input for j in stored_jobs(dq.data_dir)), key=lambda i: i["prompt"])
    assert inputs == [
        {"prompt": "a haiku about queues", "duration_s": 0.25},
        {"prompt": "a limerick about retries", "duration_s": 0.25},
    ]


def test_speech_lines_go_into_its_input_field(dq: Cli) -> None:
    run = dq.sub("submit", "openai.speech", "--batch", "-", "--json", stdin="Hello there\nGood night\n")
    assert run.code == 0, run.err
    assert [p["input"] for p in run.json()] == [{"input": "Hello there"}, {"input": "Good night"}]


def test_a_csv_file_has_a_column_per_field_and_converts_cells(dq: Cli, tmp_path: Path) -> None:
    batch = tmp_path / "jobs.csv"
    batch.write_text(
        'prompt,duration_s,fail_times,fail_with\n"one, with a comma",0.5,,\n"two\nlines",1,2,500\n',
        encoding="utf-8",
    )
    run = dq.sub("submit", "demo", "--batch", str(batch), "--json")
    assert run.code == 0, run.err
    assert [p["input"] for p in run.json()] == [
        {"prompt": "one, with a comma", "duration_s": 0.5},
        {"prompt": "two\nlines", "fail_times": 2, "fail_with": 500},
    ]


def test_a_bad_line_is_named_by_number_and_nothing_is_created(dq: Cli) -> None:
    text = '{"prompt": "fine"}\n{"prompt": "also fine"}\n\n{"prompt": ""}\nnot json\n'
    run = dq.sub("submit", "demo", "--batch", "-", stdin=text)
    assert run.code == USAGE
    assert 'line 4: demo input needs a non-empty "prompt"' in run.err
    assert "line 5: not valid JSON" in run.err
    assert "nothing was submitted" in run.err
    assert "Traceback" not in run.err
    assert stored_jobs(dq.data_dir) == []


def test_a_bad_csv_cell_is_named_by_its_line(dq: Cli, tmp_path: Path) -> None:
    batch = tmp_path / "jobs.csv"
    batch.write_text('prompt,duration_s\nfine,1\n"spans\ntwo lines",1\nbad,soon\n', encoding="utf-8")
    run = dq.sub("submit", "demo", "--batch", str(batch))
    assert run.code == USAGE
    assert "line 5: duration_s: 'soon' is not a number" in run.err
    assert stored_jobs(dq.data_dir) == []


def test_batch_usage_errors(dq: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert dq.sub("submit", "demo", "--batch", str(empty)).code == USAGE
    assert dq.sub("submit", "demo", "--batch", str(tmp_path / "missing.jsonl")).code == USAGE
    keyed = dq.sub("submit", "demo", "--batch", str(empty), "--key", "k")
    assert keyed.code == USAGE and "--key" in keyed.err
    unknown = dq.sub("submit", "nope", "--batch", "-", stdin="x\n")
    assert unknown.code == USAGE and "unknown job kind" in unknown.err
    column = tmp_path / "col.csv"
    column.write_text("prompt,colour\nx,red\n", encoding="utf-8")
    bad_column = dq.sub("submit", "demo", "--batch", str(column))
    assert bad_column.code == USAGE and "line 1: unknown column 'colour'" in bad_column.err
    assert stored_jobs(dq.data_dir) == []
