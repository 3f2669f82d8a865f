"""``desktop-queue submit`` without ``--title`` names the job by its prompt (real subprocesses)."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Cli


def submit(dq: Cli, kind: str, payload: object, *extra: str) -> dict[str, object]:
    run = dq.sub("submit", kind, "--input", json.dumps(payload), "--json", *extra)
    assert run.code == 0, run.err
    doc: dict[str, object] = run.json()
    return doc


def test_openai_jobs_without_a_title_are_named_by_their_prompt(dq: Cli, tmp_path: Path) -> None:
    chat = submit(dq, "openai.chat", {"prompt": "Summarise the meeting notes\nin three bullets"})
    assert chat["title"] == "Summarise the meeting notes"
    system = submit(
        dq,
        "openai.chat",
        {"messages": [{"role": "system", "content": "Be terse"}, {"role": "user", "content": "Name a colour"}]},
    )
    assert system["title"] == "Name a colour"
    speech = submit(dq, "openai.speech", {"input": "Welcome aboard"})
    assert speech["title"] == "Welcome aboard"
    demo = submit(dq, "demo", {"prompt": "hi", "duration_s": 0.01})
    assert demo["title"] == "hi"
    # a title given is kept
    assert submit(dq, "openai.chat", {"prompt": "anything"}, "--title", "Mine")["title"] == "Mine"
    plain = dq.sub("submit", "openai.image", "--input", '{"prompt": "A lighthouse at dusk"}')
    assert plain.code == 0 and "A lighthouse at dusk" in plain.out

    # a batch whose template has a system prompt: each line's prompt names its job
    lines = tmp_path / "prompts.txt"
    lines.write_text("Write a haiku\nWrite a limerick\n", encoding="utf-8")
    template = {"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": ""}]}
    run = dq.sub("submit", "openai.chat", "--batch", str(lines), "--input", json.dumps(template), "--json")
    assert run.code == 0, run.err
    assert [j["title"] for j in run.json()] == ["Write a haiku", "Write a limerick"]
