"""A job submitted without a title is named by its prompt: one rule (``title_for``) for
the window, the CLI and batches, read through the kind's input description."""

from __future__ import annotations

from typing import Any

import pytest

from desktop_queue.core.inputspec import FieldType, InputField, InputSpec, title_for
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.providers.openai_compat import OpenAIProfile, chat_spec, image_spec, responses_spec, speech_spec

PROFILE = OpenAIProfile()


@pytest.mark.parametrize(
    ("spec", "payload", "title"),
    [
        (chat_spec(PROFILE), {"prompt": "Summarise the meeting notes\nin bullets"}, "Summarise the meeting notes"),
        # a system prompt makes the form write messages: the user's message names the job, not the system's
        (
            chat_spec(PROFILE),
            {"messages": [{"role": "system", "content": "Be terse"}, {"role": "user", "content": "Name a colour"}]},
            "Name a colour",
        ),
        # more messages than the form shows: the last user message
        (
            chat_spec(PROFILE),
            {
                "messages": [
                    {"role": "user", "content": "first question"},
                    {"role": "assistant", "content": "an answer"},
                    {"role": "user", "content": [{"type": "text", "text": "a follow-up"}]},
                ]
            },
            "a follow-up",
        ),
        (responses_spec(PROFILE), {"prompt": "Plan a trip", "instructions": "as a pirate"}, "Plan a trip"),
        (
            image_spec(PROFILE),
            {"prompt": "A lighthouse at dusk", "size": "1024x1024", "copy": 2},
            "A lighthouse at dusk",
        ),
        (speech_spec(PROFILE), {"input": "Welcome aboard", "voice": "alloy"}, "Welcome aboard"),
        (DemoProvider().input_spec(), {"prompt": "  hi there  ", "duration_s": 1}, "hi there"),
        (chat_spec(PROFILE), {"prompt": "x" * 100}, "x" * 59 + "…"),
        (chat_spec(PROFILE), {"prompt": "   "}, None),
        (chat_spec(PROFILE), ["not", "an", "object"], None),
        (None, {"text": "a plug-in's text"}, "a plug-in's text"),
        (None, {"steps": 3}, None),
    ],
)
def test_title_for(spec: InputSpec | None, payload: Any, title: str | None) -> None:
    assert title_for(spec, payload) == title


def test_a_spec_with_its_own_prompt_field_is_read_by_it() -> None:
    spec = InputSpec(
        kind="plug",
        prompt_field="caption",
        fields=(InputField("caption", FieldType.TEXT, default="", required=True), InputField("n", FieldType.INTEGER)),
    )
    assert title_for(spec, {"caption": "Sunset over the bay", "n": 2}) == "Sunset over the bay"
