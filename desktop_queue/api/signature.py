"""Standard Webhooks signatures, verified by the OpenAI SDK before a body is parsed.

OpenAI signs a delivery with the Standard Webhooks scheme: headers ``webhook-id``,
``webhook-timestamp`` (Unix seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256
of "id.timestamp.body">``, several separated by spaces while a secret rotates), under
the endpoint's ``whsec_…`` secret. The SDK's ``webhooks.verify_signature`` checks that,
in constant time, and refuses a timestamp more than 5 minutes old or ahead.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

#: how far a delivery's timestamp may be from now, in seconds (replay protection)
TOLERANCE_S = 300


class SignatureError(Exception):
    """The delivery is not signed with the profile's secret, or is too old (or ahead)."""


@functools.cache
def _webhooks() -> Any:
    # one client only to reach its webhook helper: no request is made, no key is needed
    import openai

    return openai.OpenAI(api_key="unused-webhook-verification", base_url="http://127.0.0.1:9/").webhooks


def verify(body: bytes, headers: Mapping[str, str], secret: str) -> None:
    """Raises :class:`SignatureError` unless ``body`` is signed by ``secret`` within 5 minutes.

    Args:
        body: the raw request body, exactly as received.
        headers: the request headers (any case).
        secret: the profile's webhook secret (``whsec_…`` or raw).
    """
    import openai

    wanted = {"webhook-id", "webhook-timestamp", "webhook-signature"}
    found = {k.lower(): v for k, v in headers.items() if k.lower() in wanted}
    missing = sorted(wanted - set(found))
    if missing:
        raise SignatureError(f"missing header {', '.join(missing)}")
    try:
        _webhooks().verify_signature(body, found, secret=secret, tolerance=TOLERANCE_S)
    except openai.InvalidWebhookSignatureError as exc:
        raise SignatureError(str(exc)) from None
    except ValueError as exc:  # an undecodable secret or body, a header the SDK cannot read
        raise SignatureError(f"the signature cannot be checked: {type(exc).__name__}") from None
