"""Redaction hides secrets without mangling messages; alike errors share one signature.

Invariant 7 (no key of 8+ characters, no prompt text in a message) still holds for
every case here; what changes is that nothing else is cut: placeholder keys, words
that contain a prompt word, model names and the input's settings stay readable.
"""

from __future__ import annotations

from typing import Any

import pytest

from desktop_queue.core.present import error_signature
from desktop_queue.core.redact import REDACTED, redact

KEY = "sk-proj-Zq8Xv2LmN4pR7tY1wK9bC3dF"
PROMPT = "describe the purple walrus that sings at midnight"


# ---------------------------------------------------------------------- keys


@pytest.mark.parametrize("placeholder", ["x", "ollama", "EMPTY", "none", "sk-1234"])
def test_a_placeholder_key_shorter_than_8_characters_changes_nothing(placeholder: str) -> None:
    message = "HTTP 400: max_tokens must be <= 4096; ollama, EMPTY and none are fine; x-request-id 7; sk-1234"
    assert redact(message, {"prompt": "hi"}, secrets=(placeholder,)) == message


def test_a_real_key_is_hidden_wherever_it_appears() -> None:
    message = f"bad key {KEY}; glued:{KEY}x; {KEY[:4]} alone is fine"
    out = redact(message, secrets=(KEY,))
    assert KEY not in out and out.count(REDACTED) == 2
    assert out.endswith("sk-p alone is fine")


def test_an_8_character_key_that_is_no_key_shape_is_still_hidden() -> None:
    assert redact("key was abcd1234 here", secrets=("abcd1234",)) == f"key was {REDACTED} here"


def test_key_shapes_inside_words_are_left_alone() -> None:
    assert redact("desk-queue-worker-number-one crashed") == "desk-queue-worker-number-one crashed"
    assert REDACTED in redact("using sk-abcdefghijkl") and "abcdefghijkl" not in redact("using sk-abcdefghijkl")


# ---------------------------------------------------------------------- prompt text


@pytest.mark.parametrize(
    "message",
    [
        f"bad prompt: {PROMPT}",
        f"bad prompt: {PROMPT.upper()}",
        f'body {{"prompt": "{PROMPT}"}}',
        "the model refused: the purple walrus that sings",
        f"starts with {PROMPT[:30]}…",
    ],
    ids=["verbatim", "upper", "json", "word-run", "prefix"],
)
def test_prompt_text_is_hidden(message: str) -> None:
    out = redact(message, {"prompt": PROMPT})
    assert "walrus" not in out.lower() and "purple" not in out.lower()


def test_a_prompt_word_inside_a_longer_word_is_left_alone() -> None:
    out = redact("max_tokens is too large; tokens left: 0", {"prompt": "tokens"})
    assert out == f"max_tokens is too large; {REDACTED} left: 0"


def test_the_model_name_stays_readable_even_when_the_prompt_repeats_it() -> None:
    payload = {
        "model": "llama3.1-instruct",
        "messages": [
            {"role": "system", "content": "You answer briefly"},
            {"role": "user", "content": "llama3.1-instruct"},
        ],
    }
    out = redact("model 'llama3.1-instruct' is not loaded; system prompt too long", payload)
    assert out == "model 'llama3.1-instruct' is not loaded; system prompt too long"


def test_settings_of_the_input_are_not_prompt_text() -> None:
    payload = {
        "prompt": "write a summary",
        "voice": "shimmer",
        "format": "opus",
        "size": "1024x1024",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "report", "schema": {"type": "object", "required": ["summary", "headline"]}},
        },
    }
    message = "json_schema output misses required field(s): summary, headline (voice shimmer, size 1024x1024)"
    assert redact(message, payload) == message


def test_a_setting_inside_prompt_text_does_not_leak_the_prompt() -> None:
    """Only a match that is nothing but the setting stays; a quote around it goes whole."""
    payload = {"model": "mistral-large", "prompt": "ask mistral-large about the purple walrus tonight"}
    out = redact("could not parse: ask mistral-large about the purple walrus tonight", payload)
    assert out == f"could not parse: {REDACTED}"


def test_three_short_common_words_are_no_quote() -> None:
    out = redact("this is not a chat model", {"prompt": "it is not a drill, this is not a test"})
    assert out == "this is not a chat model"


def test_unrelated_text_is_untouched() -> None:
    message = "openai.chat: HTTP 404 Not Found at POST /v1/chat/completions — is the base URL right?"
    assert redact(message, {"prompt": PROMPT, "model": "gpt-4o-mini"}, secrets=(KEY, "x")) == message


# ---------------------------------------------------------------------- error signatures


def sig(message: str, cls: str = "retryable", status: Any = 500) -> str:
    return error_signature({"last_error": {"class": cls, "status": status, "message": message}})


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("HTTP 500: boom (request id req_8f3a9c1e5b2d4f6a8c0e)", "HTTP 500: boom (request id req_01b2c3d4e5f6)"),
        ("call 3f2a9c1e-5b2d-4f6a-8c0e-1234567890ab failed", "call 00000000-1111-2222-3333-444444444444 failed"),
        ("trace 8f3a9c1e5b2d4f6a lost", "trace 0123456789abcdef lost"),
        ("token AbCdEf0123456789XyZ expired", "token Zz9988776655aabbCC expired"),
        ("Please try again in 6m0s", "Please try again in 20ms"),
        ("no answer within 45 s (attempt timeout)", "no answer within 600 s (attempt timeout)"),
        ("The model `gpt-9` does not exist", "The model `o7-preview` does not exist"),
        ("unknown profile 'anything'", "unknown profile 'work'"),
        ("Limit 10000, used 9,876.5", "Limit 30000, used 12"),
        ("response chatcmpl-AbC123dEf failed", "response chatcmpl-ZZ9 failed".replace("ZZ9", "Qq77wW")),
    ],
)
def test_alike_errors_share_a_signature(first: str, second: str) -> None:
    assert sig(first) == sig(second)
    assert "…" in sig(first) or "#" in sig(first)


def test_the_id_kind_and_model_names_stay_readable() -> None:
    assert sig("HTTP 500: boom (request id req_8f3a9c1e5b)") == "retryable 500 HTTP #: boom (request id req_…)"
    assert sig("gpt-4o-mini failed: max_tokens too large") == "retryable 500 gpt-4o-mini failed: max_tokens too large"
    assert sig("don't know what's wrong") == "retryable 500 don't know what's wrong"
    assert sig("at POST /v1/chat/completions") == "retryable 500 at POST /v1/chat/completions"


def test_different_errors_keep_different_signatures() -> None:
    assert sig("HTTP 500: boom") != sig("HTTP 500: bust")
    assert sig("boom", cls="fatal") != sig("boom")
    assert error_signature({"last_error": None}) == ""
