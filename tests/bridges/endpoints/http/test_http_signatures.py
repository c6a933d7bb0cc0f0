"""Signatures against the standardwebhooks package, for any body, id and key (Hypothesis)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import time

import pytest
import standardwebhooks
from hypothesis import given
from hypothesis import strategies as st

from bridges.endpoints.http import signatures
from bridges.endpoints.http.signatures import SignatureError

ids = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="."),
    min_size=1,
    max_size=40,
)
keys = st.binary(min_size=1, max_size=64)
bodies = st.text(max_size=300)


@given(key=keys, msg_id=ids, body=bodies, skew=st.integers(-299, 299))
def test_our_signature_is_the_packages_and_each_side_verifies_the_other(
    key: bytes, msg_id: str, body: str, skew: int
) -> None:
    secret = "whsec_" + base64.b64encode(key).decode()
    assert signatures.secret_key(secret) == key
    now = int(time.time())
    stamp = now + skew
    data = body.encode()
    headers = signatures.sign_headers("standard-webhooks", [key], msg_id, stamp, data)
    package = standardwebhooks.Webhook(secret)
    when = datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC)
    assert headers["webhook-signature"] == package.sign(msg_id, when, body)
    package.verify(data, headers, json_parse=False)  # theirs accepts ours
    theirs = {**headers, "webhook-signature": package.sign(msg_id, when, body)}
    signatures.verify_standard([key], theirs, data, now=now, tolerance=300)  # ours accepts theirs


@given(key=keys, msg_id=ids, body=st.binary(min_size=1, max_size=200), data=st.data())
def test_any_change_to_the_body_id_or_timestamp_is_refused(
    key: bytes, msg_id: str, body: bytes, data: st.DataObject
) -> None:
    now = 1_700_000_000
    headers = signatures.sign_headers("standard-webhooks", [key], msg_id, now, body)
    signatures.verify_standard([key], headers, body, now=now, tolerance=300)
    index = data.draw(st.integers(0, len(body) - 1))
    flipped = body[:index] + bytes([body[index] ^ 1]) + body[index + 1 :]
    with pytest.raises(SignatureError):
        signatures.verify_standard([key], headers, flipped, now=now, tolerance=300)
    moved = {**headers, "webhook-timestamp": str(now + 1)}
    with pytest.raises(SignatureError):
        signatures.verify_standard([key], moved, body, now=now, tolerance=300)
    other = {**headers, "webhook-id": msg_id + "x"}
    with pytest.raises(SignatureError):
        signatures.verify_standard([key], other, body, now=now, tolerance=300)
    with pytest.raises(SignatureError):
        signatures.verify_standard([key + b"x"], headers, body, now=now, tolerance=300)
    # Rotation: any of several keys, any of several signatures.
    rotated = {**headers, "webhook-signature": "v1,AAAA " + headers["webhook-signature"]}
    signatures.verify_standard([b"old", key], rotated, body, now=now, tolerance=300)


@given(
    headers=st.dictionaries(
        st.sampled_from(
            ["webhook-id", "webhook-timestamp", "webhook-signature", "x-hub-signature-256"]
        ),
        st.text(max_size=120),
    ),
    body=st.binary(max_size=50),
)
def test_whatever_the_headers_only_signature_error_escapes(
    headers: dict[str, str], body: bytes
) -> None:
    with pytest.raises(SignatureError):
        signatures.verify_standard([b"k"], headers, body, now=time.time(), tolerance=300)
    with pytest.raises(SignatureError):
        signatures.verify_github([b"k"], headers, body)
    with pytest.raises(SignatureError):
        signatures.verify_bearer(b"k", headers)


@given(key=keys, body=st.binary(max_size=200))
def test_github_signature_matches_the_documented_hmac(key: bytes, body: bytes) -> None:
    expected = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    assert signatures.github_signature(key, body) == expected
    signatures.verify_github([key], {"x-hub-signature-256": expected}, body)


def test_secret_formats() -> None:
    assert signatures.secret_key("whsec_aGVsbG8=") == b"hello"
    assert signatures.secret_key("whsec_aGVsbG8") == b"hello"  # unpadded, as the package allows
    assert signatures.secret_key("plain text") == b"plain text"
    for bad in ("whsec_", "whsec_!!", ""):
        with pytest.raises(ValueError, match="secret"):
            signatures.secret_key(bad)
