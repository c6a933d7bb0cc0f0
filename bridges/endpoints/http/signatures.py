"""Webhook signatures: Standard Webhooks and GitHub, both signed and verified here.

Both schemes are an HMAC-SHA256 over the exact body bytes; the code is a few
lines and is kept here (rather than in a dependency) so that verifying needs
nothing but :mod:`hmac`, compares in constant time (:func:`hmac.compare_digest`)
and never decodes the body. The ``standardwebhooks`` package from PyPI is
the independent peer in the tests, in both directions.

- **Standard Webhooks** (https://www.standardwebhooks.com): headers
  ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and
  ``webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">``
  (several space-separated signatures are allowed, for key rotation). A
  secret ``whsec_<base64>`` is the base64-decoded key; any other string is
  used as raw bytes (its UTF-8 encoding).
- **GitHub**: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``;
  the secret is used as raw bytes.

Nothing here logs; errors say what is wrong without echoing a secret or a
signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Final, Literal

Scheme = Literal["standard-webhooks", "github", "none"]

SECRET_PREFIX: Final = "whsec_"
#: Signatures (or ids) longer than this are refused before any HMAC is computed.
MAX_SIGNATURE_HEADER: Final = 4096
#: Most ``v1,...`` entries looked at in one ``webhook-signature`` header.
MAX_SIGNATURES: Final = 16


class SignatureError(Exception):
    """A request is not signed as it must be; the message is safe to log."""


def secret_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (``whsec_<base64>`` or raw).

    Raises:
      ValueError: ``whsec_`` followed by something that is not base64, or empty.
    """
    if secret.startswith(SECRET_PREFIX):
        text = secret[len(SECRET_PREFIX) :]
        try:
            key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a whsec_ secret must be base64 after the prefix") from None
    else:
        key = secret.encode()
    if not key:
        raise ValueError("the secret is empty")
    return key


def _hmac(key: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def standard_signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value (``v1,<base64>``) for one key."""
    digest = _hmac(key, f"{msg_id}.{timestamp}.".encode(), body)
    return "v1," + base64.b64encode(digest).decode("ascii")


def github_signature(key: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value (``sha256=<hex>``)."""
    return "sha256=" + _hmac(key, body).hex()


def sign_headers(
    scheme: Scheme, keys: Sequence[bytes], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers that sign ``body`` by ``scheme`` (with the first key; none for "none")."""
    if scheme == "standard-webhooks":
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(
                standard_signature(key, msg_id, timestamp, body) for key in keys[:1]
            ),
        }
    if scheme == "github":
        return {"x-hub-signature-256": github_signature(keys[0], body)}
    return {}


def verify_standard(
    keys: Sequence[bytes],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    tolerance: float,
) -> None:
    """Check a Standard Webhooks signature (any of ``keys``, any ``v1`` entry).

    Args:
      headers: lower-case names.
      now: the current Unix time, s.
      tolerance: how far the timestamp may be from ``now``, either way, s.

    Raises:
      SignatureError: a header missing or malformed, a stale timestamp, or no match.
    """
    msg_id = headers.get("webhook-id", "")
    timestamp_text = headers.get("webhook-timestamp", "")
    signatures = headers.get("webhook-signature", "")
    if not (msg_id and timestamp_text and signatures):
        raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
    if len(signatures) > MAX_SIGNATURE_HEADER or len(msg_id) > MAX_SIGNATURE_HEADER:
        raise SignatureError("webhook-signature or webhook-id is too long")
    check_timestamp(timestamp_text, now=now, tolerance=tolerance)
    expected = [_hmac(key, f"{msg_id}.{timestamp_text}.".encode(), body) for key in keys]
    for entry in signatures.split()[:MAX_SIGNATURES]:
        version, _, value = entry.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        # Every key is compared, match or not: the time taken says nothing.
        if any([hmac.compare_digest(given, digest) for digest in expected]):
            return
    raise SignatureError("no matching webhook-signature")


def check_timestamp(text: str, *, now: float, tolerance: float) -> None:
    """Check a ``webhook-timestamp`` (decimal Unix seconds) against ``now``.

    Raises:
      SignatureError: not a decimal integer, or further than ``tolerance`` from ``now``.
    """
    if not (text.isascii() and text.isdigit() and len(text) <= 12):
        raise SignatureError("webhook-timestamp is not a Unix time in seconds")
    if abs(int(text) - now) > tolerance:
        raise SignatureError(
            f"webhook-timestamp is {int(now) - int(text):+d} s from now (tolerance {tolerance:g} s)"
        )


def verify_github(keys: Sequence[bytes], headers: Mapping[str, str], body: bytes) -> None:
    """Check ``X-Hub-Signature-256`` against any of ``keys``.

    Raises:
      SignatureError: the header is missing, malformed, or matches no key.
    """
    given = headers.get("x-hub-signature-256", "")
    if not given:
        raise SignatureError("missing x-hub-signature-256")
    if len(given) > MAX_SIGNATURE_HEADER:
        raise SignatureError("x-hub-signature-256 is too long")
    given_bytes = given.encode("ascii", "replace")
    matches = [
        hmac.compare_digest(given_bytes, github_signature(key, body).encode()) for key in keys
    ]
    if not any(matches):
        raise SignatureError("x-hub-signature-256 does not match")


def verify_bearer(expected: bytes, headers: Mapping[str, str]) -> None:
    """Check ``Authorization: Bearer <token>`` in constant time.

    Raises:
      SignatureError: missing or wrong.
    """
    given = headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise SignatureError("missing bearer token")
    if not hmac.compare_digest(token.strip().encode("utf-8", "replace"), expected):
        raise SignatureError("wrong bearer token")
