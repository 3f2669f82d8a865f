"""Input descriptions (core/inputspec.py) and batch reading (core/batchinput.py), without Qt."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop_queue.core.batchinput import BatchFormat, detect_format, read_batch, title_of
from desktop_queue.core.inputspec import Choice, FieldType, InputField, InputSpec, spec_of
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.providers.openai_compat import OpenAIChatProvider, OpenAIImageProvider

DEMO = DemoProvider().input_spec()
CHAT = OpenAIChatProvider().input_spec()


def test_a_fresh_form_builds_only_the_required_fields() -> None:
    assert DEMO.build(DEMO.defaults()) == {"prompt": ""}
    assert DEMO.build({**DEMO.defaults(), "prompt": "x", "duration_s": 2.5}) == {"prompt": "x", "duration_s": 2.5}
    assert DEMO.build({**DEMO.defaults(), "prompt": "x", "duration_s": 1}) == {"prompt": "x"}  # 1 == 1.0


def test_parse_refuses_what_the_form_cannot_show_exactly() -> None:
    assert DEMO.parse({"prompt": "x", "duration_s": 1.0})["duration_s"] == 1.0
    with pytest.raises(ValueError, match='no field for "colour"'):
        DEMO.parse({"prompt": "x", "colour": "red"})
    with pytest.raises(ValueError, match='"fail_with" must be one of'):
        DEMO.parse({"prompt": "x", "fail_with": 418})  # valid input, but not one of the form's choices
    with pytest.raises(ValueError, match="must be at least 0"):
        DEMO.parse({"prompt": "x", "duration_s": -1})
    with pytest.raises(ValueError, match="not a JSON object"):
        DEMO.parse(["x"])


def test_the_chat_form_writes_a_system_prompt_and_a_schema_as_the_api_wants() -> None:
    values = {
        **CHAT.defaults(),
        "prompt": "a card",
        "system": "be brief",
        "output_format": "json_schema",
        "schema_name": "card",
        "schema": {"type": "object", "required": ["title"]},
        "temperature": 0.2,
    }
    payload = CHAT.build(values)
    assert payload == {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a card"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "card", "schema": {"type": "object", "required": ["title"]}},
        },
        "temperature": 0.2,
    }
    assert CHAT.parse(payload) == values
    assert CHAT.build({**values, "output_format": "text"}) == {
        "messages": payload["messages"],
        "temperature": 0.2,
    }  # the schema fields are hidden, and not written, unless a schema is asked for
    with pytest.raises(ValueError, match="system prompt and one user message"):
        CHAT.parse({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})


chat_values = st.fixed_dictionaries(
    {
        "prompt": st.text(min_size=1),
        "system": st.none() | st.text(min_size=1),
        "model": st.none() | st.text(min_size=1),
        "temperature": st.none() | st.floats(0, 2, allow_nan=False),
        "max_tokens": st.none() | st.integers(1, 100_000),
        "output_format": st.sampled_from(["text", "json_object", "json_schema"]),
        "seed": st.none() | st.integers(-(2**31), 2**31 - 1),
    }
)


@settings(max_examples=200, deadline=None)
@given(chat_values)
def test_chat_values_survive_build_then_parse(values: dict[str, Any]) -> None:
    full = {**CHAT.defaults(), **values}
    payload = CHAT.build(full)
    again = CHAT.parse(json.loads(json.dumps(payload)))
    assert CHAT.build(again) == payload


def test_convert_reads_a_csv_cell_as_the_fields_type() -> None:
    number = InputField("n", FieldType.NUMBER, default=1.0)
    assert number.convert("2.5") == 2.5 and number.convert(" ") == 1.0
    with pytest.raises(ValueError, match="not a number"):
        number.convert("soon")
    flag = InputField("b", FieldType.BOOLEAN, default=False)
    assert flag.convert("yes") is True and flag.convert("0") is False
    pick = InputField("c", FieldType.CHOICE, choices=(Choice(500, "HTTP 500"), Choice("fatal", "fatal")))
    assert pick.convert("500") == 500 and pick.convert("HTTP 500") == 500 and pick.convert("fatal") == "fatal"
    with pytest.raises(ValueError, match="not one of"):
        pick.convert("sometimes")
    blob = InputField("j", FieldType.JSON)
    assert blob.convert('{"a": [1]}') == {"a": [1]}


def test_a_provider_without_a_description_or_with_a_broken_one_has_no_form() -> None:
    class Plain:
        kind = "plain"

    class Broken:
        kind = "broken"

        def input_spec(self) -> InputSpec:
            raise RuntimeError("oops")

    assert spec_of(Plain()) is None
    assert spec_of(Broken()) is None
    assert spec_of(DemoProvider()) == DEMO


def test_an_image_count_makes_numbered_copies() -> None:
    spec = OpenAIImageProvider().input_spec()
    values = {**spec.defaults(), "prompt": "a cat", "count": 3}
    assert spec.build_all(values) == [{"prompt": "a cat", "copy": i} for i in (1, 2, 3)]
    assert spec.build_all({**values, "count": 1}) == [{"prompt": "a cat"}]
    assert spec.parse({"prompt": "a cat", "copy": 2})["prompt"] == "a cat"


# --------------------------------------------------------------------------- batches


def test_text_lines_become_prompts_with_their_line_numbers_and_titles() -> None:
    read = read_batch(
        "first\n\n  second  \n" + "x" * 100 + "\n",
        BatchFormat.TEXT,
        DEMO,
        template={**DEMO.defaults(), "duration_s": 0.5},
        validate=DemoProvider().validate,
    )
    assert read.ok and not read.problems
    assert [(i.line, i.payload) for i in read.items] == [
        (1, {"prompt": "first", "duration_s": 0.5}),
        (3, {"prompt": "second", "duration_s": 0.5}),
        (4, {"prompt": "x" * 100, "duration_s": 0.5}),
    ]
    assert [i.title for i in read.items][:2] == ["first", "second"]
    assert read.items[2].title == "x" * 59 + "…"
    assert read.summary() == "3 jobs will be created"


def test_every_bad_line_is_reported_by_number() -> None:
    text = '{"prompt": "ok"}\n{"prompt": ""}\n\n[1]\n{"prompt": "ok"}\n{bad\n'
    read = read_batch(text, BatchFormat.JSONL, DEMO, validate=DemoProvider().validate)
    assert [p.line for p in read.problems] == [2, 4, 6]
    assert "non-empty" in read.problems[0].message
    assert "not a JSON object" in read.problems[1].message
    assert "not valid JSON" in read.problems[2].message
    assert not read.ok
    assert read.summary().startswith("3 lines have problems: nothing will be created")
    assert read.repeats == 1  # line 5 repeats line 1


def test_csv_rows_start_where_their_quoted_cells_start() -> None:
    text = 'prompt,duration_s\n"two\nlines",2\n"three\nline\ncell",x\n'
    read = read_batch(text, BatchFormat.CSV, DEMO)
    assert [(i.line, i.payload) for i in read.items] == [(2, {"prompt": "two\nlines", "duration_s": 2.0})]
    assert [(p.line, p.message) for p in read.problems] == [(4, "duration_s: 'x' is not a number")]


def test_a_kind_without_a_prompt_field_refuses_plain_text() -> None:
    read = read_batch("a\nb\n", BatchFormat.TEXT, None)
    assert not read.ok and "prompt field" in read.problems[0].message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("jobs.csv", "prompt\nx\n", BatchFormat.CSV),
        ("jobs.jsonl", "x", BatchFormat.JSONL),
        (None, '\n  {"prompt": "x"}\n', BatchFormat.JSONL),
        (None, "a haiku\n", BatchFormat.TEXT),
        ("notes.txt", "{ not json, a brace }", BatchFormat.JSONL),
    ],
)
def test_detect_format(name: str | None, text: str, expected: BatchFormat) -> None:
    assert detect_format(name, text) is expected


def test_title_of() -> None:
    assert title_of("  A haiku\nsecond") == "A haiku"
    assert title_of("   ") is None and title_of(None) is None
