"""How long a throttled client waits, from every header servers and gateways really send.

A pure function, so a table; one row per header shape. Garbled values are skipped (the
queue then uses its own backoff), never turned into a wait of 0.
"""

from __future__ import annotations

import pytest
from fakeserver import Action, FakeOpenAI
from provider_helpers import JobView

from desktop_queue.core import ErrorClass, RunContext
from desktop_queue.providers.openai_compat import (
    OpenAIChatProvider,
    OpenAIProfile,
    rate_limit_info,
    retry_after_from_headers,
)

NOW = 1_800_000_000.0  # 2027-01-15: "now" for dates and epoch timestamps


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # the standard one: seconds, or an HTTP date
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after": "Fri, 15 Jan 2027 08:00:30 GMT"}, 30.0),
        ({"retry-after": "Fri, 15 Jan 2027 07:00:00 GMT"}, 0.0),  # a date in the past: go now
        # OpenAI's milliseconds win over the rounded seconds
        ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
        # OpenAI's reset durations (the exhausted one counts)
        ({"x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-requests": "20ms"}, 0.02),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "2s",
                "x-ratelimit-remaining-tokens": "50",
                "x-ratelimit-reset-tokens": "1m",
            },
            2.0,
        ),
        # x-ratelimit-reset: seconds, or an epoch timestamp (GitHub style) or epoch ms (OpenRouter)
        ({"x-ratelimit-reset": "12"}, 12.0),
        ({"x-ratelimit-reset": str(int(NOW) + 40)}, 40.0),
        ({"x-ratelimit-reset": str(int(NOW * 1000) + 3000)}, 3.0),
        # a reset timestamp sent where OpenAI sends a duration
        ({"x-ratelimit-reset-requests": str(int(NOW) + 9)}, 9.0),
        # IETF drafts: RateLimit-Reset (seconds), and the structured RateLimit header
        ({"ratelimit-reset": "33"}, 33.0),
        ({"ratelimit": '"default";r=0;t=17'}, 17.0),
        # the LiteLLM proxy: upstream headers under its llm_provider- prefix
        ({"llm_provider-retry-after": "4"}, 4.0),
        ({"llm_provider-retry-after-ms": "250"}, 0.25),
        ({"llm_provider-x-ratelimit-reset-requests": "3s"}, 3.0),
        # the proxy's own header wins over the upstream's
        ({"retry-after": "1", "llm_provider-retry-after": "60"}, 1.0),
        # nothing, or nothing usable
        ({}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after-ms": "lots"}, None),
        ({"x-ratelimit-reset-requests": "-1"}, None),
        ({"x-ratelimit-reset-tokens": "6 minutes"}, None),
        ({"x-ratelimit-reset": "tomorrow"}, None),
        ({"ratelimit": "garbage;t=x"}, None),
        ({"retry-after": ""}, None),
        # a garbled header does not hide a good one further down
        ({"retry-after": "soon", "x-ratelimit-reset-requests": "5s"}, 5.0),
        ({"retry-after-ms": "lots", "llm_provider-retry-after": "8"}, 8.0),
    ],
)
def test_retry_after_from_headers(headers: dict[str, str], expected: float | None) -> None:
    got = retry_after_from_headers(headers, now=lambda: NOW)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_rate_limit_info_reads_garbled_numbers_as_absent() -> None:
    info = rate_limit_info(
        {
            "x-ratelimit-remaining-requests": "inf",
            "x-ratelimit-remaining-tokens": "nan",
            "x-ratelimit-reset-requests": "1s",
        }
    )
    assert info is not None and info.remaining_requests is None and info.remaining_tokens is None
    assert info.reset_s == 1.0


def test_a_litellm_style_429_through_the_sdk_waits_as_the_upstream_said(
    server: FakeOpenAI, profile: OpenAIProfile
) -> None:
    """LiteLLM passes the upstream's Retry-After on only as ``llm_provider-retry-after``."""
    body = {
        "error": {
            "message": "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached",
            "type": "throttling_error",
            "param": None,
            "code": "429",
        }
    }
    server.push("chat", Action(status=429, body=body, headers={"llm_provider-retry-after": "20"}))
    outcome = OpenAIChatProvider(profile).run(
        JobView({"prompt": "hello there"}), RunContext(job_id="j", attempt=1, idempotency_key="k")
    )
    assert outcome.error_class is ErrorClass.THROTTLED and outcome.retry_after == 20.0
    # LiteLLM's code "429" repeats the status: said once
    assert outcome.message.startswith("openai.chat: HTTP 429: litellm.RateLimitError")
