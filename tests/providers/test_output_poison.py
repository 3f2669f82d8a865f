"""A job that asks for JSON and keeps getting something else is poison: dead after three such outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fakeserver import FakeOpenAI
from provider_helpers import step

from desktop_queue.core import FakeClock, Queue, State
from desktop_queue.core.model import ErrorClass, EventType
from desktop_queue.providers.openai_compat import OpenAIChatProvider, OpenAIProfile, output_problem

SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "card", "schema": {"type": "object", "required": ["title", "body"]}},
}


@pytest.mark.parametrize(
    ("text", "response_format", "problem"),
    [
        ("plain words", None, None),
        ("plain words", {"type": "text"}, None),
        ('{"a": 1}', {"type": "json_object"}, None),
        ("not json", {"type": "json_object"}, "not the JSON"),
        ("[1, 2]", {"type": "json_object"}, "not an object"),
        ('{"title": "t", "body": "b"}', SCHEMA, None),
        ('{"title": "t"}', SCHEMA, "required field(s): body"),
    ],
)
def test_output_problem(text: str, response_format: Any, problem: str | None) -> None:
    found = output_problem(text, response_format)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_three_outputs_that_miss_the_schema_dead_letter_the_job_as_poison(
    server: FakeOpenAI, profile: OpenAIProfile, open_queue: Callable[..., Queue], clock: FakeClock
) -> None:
    providers = {"openai.chat": OpenAIChatProvider(profile)}
    queue = open_queue(providers)
    job = queue.submit("openai.chat", {"prompt": "a card", "response_format": SCHEMA}, max_attempts=5).job
    outcomes = []
    while queue.get(job.id).state == State.QUEUED:
        clock.advance(120)  # past any backoff
        ran = step(queue, providers)
        assert ran is not None
        outcomes.append(ran[1])
    final = queue.get(job.id)
    assert final.state == State.DEAD
    assert [o.error_class for o in outcomes] == [ErrorClass.POISON] * 3  # not the whole budget of 5
    assert final.attempts == 3 and final.last_error is not None and final.last_error["class"] == "poison"
    assert final.events[-1].type == EventType.DEAD_LETTERED and "poison" in final.events[-1].detail["reason"]
    assert server.count("chat") == 3
