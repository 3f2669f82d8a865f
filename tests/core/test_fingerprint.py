"""Idempotency keys stay byte-for-byte what shared/DESIGN.md section 3 defines, however they are assembled."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from desktop_queue.core.fingerprint import canonical_json, fingerprint, input_digest

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _reference(doc: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


@given(kind=st.text(min_size=1, max_size=20), version=st.text(max_size=10), payload=json_values)
def test_keys_equal_the_canonical_json_of_the_whole_document(kind: str, version: str, payload: Any) -> None:
    body = canonical_json(payload)
    expected = _reference({"kind": kind, "version": version, "input": payload})
    assert fingerprint(kind, version, payload) == expected
    assert fingerprint(kind, version, payload, body=body) == expected
    digest = _reference({"kind": kind, "input": payload})
    assert input_digest(kind, payload) == input_digest(kind, payload, body=body) == digest


def test_a_known_key_does_not_change() -> None:
    # a stored job's key must still match its input after an upgrade
    assert (
        fingerprint("demo", "1", {"prompt": "hello"})
        == "b43924158acf5f0fdeb436c4ad6ab32983c6e8a382285391e1af727927165971"
    )
