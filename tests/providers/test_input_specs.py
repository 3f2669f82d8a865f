"""Each provider's input description agrees with its own ``validate``.

A form built from the description must never offer what ``validate`` refuses, nor
refuse (by its limits) what ``validate`` accepts: its defaults give an input that
validates, every limit is exactly where validation draws it, and any values inside
the limits validate (Hypothesis).
"""

from __future__ import annotations

from typing import Any

import pytest
from fakeserver import FakeOpenAI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provider_helpers import JobView

from desktop_queue.core import RunContext
from desktop_queue.core.errors import InvalidInput
from desktop_queue.core.inputspec import FieldType, InputField, InputSpec, same_value, spec_of
from desktop_queue.providers.demo import DemoProvider
from desktop_queue.providers.openai_compat import (
    OpenAIChatProvider,
    OpenAIProfile,
    OpenAISpeechProvider,
    make_providers,
)

PROVIDERS: dict[str, Any] = {"demo": DemoProvider(), **make_providers()}


def spec(kind: str) -> InputSpec:
    found = spec_of(PROVIDERS[kind])
    assert found is not None, f"{kind} gives no input description"
    return found


def base(s: InputSpec) -> dict[str, Any]:
    assert s.prompt_field is not None
    return {**s.defaults(), s.prompt_field: "a prompt"}


def validates(kind: str, payload: Any) -> bool:
    try:
        PROVIDERS[kind].validate(payload)
    except InvalidInput:
        return False
    return True


def direct(s: InputSpec, f: InputField) -> bool:
    """True if the field's value lands in the input under its own name (not re-encoded by a codec)."""
    probe = f.choices[-1].value if f.choices else f.maximum if f.maximum is not None else f.minimum
    if probe is None or same_value(probe, f.default):
        return True
    return bool(s.build({**base(s), f.name: probe}).get(f.name) == probe)


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_every_kind_describes_its_input_and_the_defaults_validate(kind: str) -> None:
    s = spec(kind)
    assert s.kind == kind
    payloads = s.build_all(base(s))
    assert payloads and all(validates(kind, p) for p in payloads)
    assert not validates(kind, s.build(s.defaults())), "an empty prompt must not pass"
    assert s.parse(payloads[0]) == base(s)


def limit_cases() -> list[tuple[str, str, str, Any, bool]]:
    cases = []
    for kind in sorted(PROVIDERS):
        s = spec(kind)
        for f in s.fields:
            if f.name == s.count_field or not direct(s, f):
                continue  # a count is not input; a re-encoded field is tested with its codec
            if f.minimum is not None:
                low = f.minimum
                cases.append((kind, f.name, "minimum", low, True))
                cases.append((kind, f.name, "below minimum", low - (1 if f.type is FieldType.INTEGER else 0.01), False))
            if f.maximum is not None:
                high = f.maximum
                cases.append((kind, f.name, "maximum", high, True))
                cases.append(
                    (kind, f.name, "above maximum", high + (1 if f.type is FieldType.INTEGER else 0.01), False)
                )
            if f.type is FieldType.CHOICE:
                for c in f.choices:
                    cases.append((kind, f.name, f"choice {c.value!r}", c.value, True))
                cases.append((kind, f.name, "outside the choices", "bogus-value", f.free_text))
            if f.max_length is not None:
                cases.append((kind, f.name, "max length", "x" * f.max_length, True))
                cases.append((kind, f.name, "over max length", "x" * (f.max_length + 1), False))
    return cases


@pytest.mark.parametrize(("kind", "name", "case", "value", "ok"), limit_cases())
def test_each_limit_is_where_validation_draws_it(kind: str, name: str, case: str, value: Any, ok: bool) -> None:
    s = spec(kind)
    f = s.field(name)
    if f.type is FieldType.INTEGER:
        value = int(value)
    assert (f.accepts(value) is None) is ok, f"the spec's {case} of {kind}.{name}"
    assert validates(kind, s.build({**base(s), name: value})) is ok, f"validate and the {case} of {kind}.{name}"


def field_values(f: InputField) -> st.SearchStrategy[Any]:
    none = st.none() if f.default is None and not f.required else st.nothing()
    if f.type in (FieldType.STRING, FieldType.TEXT):
        text = st.text(min_size=1, max_size=f.max_length or 50).filter(str.strip)
        return text | none if not f.choices else st.sampled_from([c.value for c in f.choices]) | none
    if f.type is FieldType.INTEGER:
        return st.integers(int(f.minimum if f.minimum is not None else -1000), int(f.maximum or 1000)) | none
    if f.type is FieldType.NUMBER:
        low = f.minimum if f.minimum is not None else -1000.0
        high = f.maximum if f.maximum is not None else 1000.0
        return st.floats(low, high, allow_nan=False) | none
    if f.type is FieldType.CHOICE:
        return st.sampled_from([c.value for c in f.choices]) | none
    if f.type is FieldType.BOOLEAN:
        return st.booleans() | none
    return st.just({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}) | none


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_values_inside_the_limits_validate(kind: str, data: st.DataObject) -> None:
    s = spec(kind)
    values = base(s)
    for f in s.fields:
        if f.name != s.prompt_field:
            values[f.name] = data.draw(field_values(f), label=f.name)
    for payload in s.build_all(values):
        assert validates(kind, payload), payload
        assert s.parse(payload) is not None


def test_a_chat_form_with_a_schema_asks_for_it_and_its_answer_is_checked(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    """The form's system prompt and schema reach the server as the API wants; a plain answer is poison."""
    s = OpenAIChatProvider(profile).input_spec()
    values = {
        **base(s),
        "system": "answer as JSON",
        "output_format": "json_schema",
        "schema": {"type": "object", "required": ["title"]},
    }
    outcome = OpenAIChatProvider(profile).run(JobView(s.build(values)), RunContext("job-1", 1, "key-1"))
    body = server.of("chat")[0].body
    assert body["messages"] == [
        {"role": "system", "content": "answer as JSON"},
        {"role": "user", "content": "a prompt"},
    ]
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["title"]
    assert outcome.error_class == "poison"  # the fake server answers "generated text", not JSON


def test_the_speech_forms_speed_reaches_the_server(server: FakeOpenAI, profile: OpenAIProfile) -> None:
    provider = OpenAISpeechProvider(profile)
    s = provider.input_spec()
    payload = s.build({**base(s), "speed": 1.5, "format": "wav"})
    outcome = provider.run(JobView(payload, kind="openai.speech"), RunContext("job-1", 1, "key-1"))
    assert outcome.ok, outcome
    body = server.of("speech")[0].body
    assert body["speed"] == 1.5 and body["response_format"] == "wav"
    assert not validates("openai.speech", {"input": "x", "speed": 5})
