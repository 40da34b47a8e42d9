"""Inbound webhook signatures: Standard Webhooks and GitHub's X-Hub-Signature-256.

A delivery is de-duplicated on what its signature covers: Standard Webhooks signs its
`webhook-id` (with a timestamp), so that id is the key; GitHub signs only the body (its
X-GitHub-Delivery is not signed, so a replay may carry any id), so the key is the body's
SHA-256: the same body is one delivery, whatever id it comes with.

Both are HMAC-SHA256, checked here with a constant-time comparison (no dependency). The
trigger's secret is `whsec_` and base64: Standard Webhooks keys its HMAC with the decoded
bytes (as the specification says); GitHub with the secret's text as the sender configured it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from keel_stream.errors import WebhookDeliveryIdMissing, WebhookSignatureInvalid

__all__ = ["MAX_DELIVERY_ID", "TOLERANCE_S", "Verified", "verify"]

TOLERANCE_S: Final = 300
"""A Standard Webhooks timestamp further than this from now is refused (a replayed request)."""
MAX_DELIVERY_ID: Final = 200
_SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - the format's prefix, not a secret


@dataclass(frozen=True, slots=True)
class Verified:
    key: str
    """What the delivery is de-duplicated on: covered by its signature."""
    delivery_id: str
    """The sender's delivery id, as sent (for `{{deliveryId}}`)."""


def _delivery_id(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name, "").strip()
    if not value or len(value) > MAX_DELIVERY_ID or "\x00" in value:
        raise WebhookDeliveryIdMissing(f"the {name} header (1-{MAX_DELIVERY_ID} characters)")
    return value


def _standard(secret: str, headers: Mapping[str, str], body: bytes, now_s: float) -> Verified:
    message_id = _delivery_id(headers, "webhook-id")
    timestamp = headers.get("webhook-timestamp", "")
    if not timestamp.isdigit() or abs(now_s - int(timestamp)) > TOLERANCE_S:
        raise WebhookSignatureInvalid("webhook-timestamp is missing or not within 5 minutes")
    try:
        key = base64.b64decode(secret.removeprefix(_SECRET_PREFIX), validate=True)
    except binascii.Error as exc:  # a secret this service made always decodes
        raise WebhookSignatureInvalid("the trigger's secret is not base64") from exc
    signed = message_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in headers.get("webhook-signature", "").split():
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature, expected):
            return Verified(message_id, message_id)
    raise WebhookSignatureInvalid("no webhook-signature verifies under the trigger's secret")


def _github(secret: str, headers: Mapping[str, str], body: bytes) -> Verified:
    delivery = _delivery_id(headers, "x-github-delivery")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(headers.get("x-hub-signature-256", ""), expected):
        raise WebhookSignatureInvalid("X-Hub-Signature-256 does not verify under the secret")
    return Verified("sha256:" + hashlib.sha256(body).hexdigest(), delivery)


def verify(
    scheme: str, secret: str, headers: Mapping[str, str], body: bytes, now_s: float
) -> Verified:
    """The key and delivery id of a request whose signature verifies; WebhookSignatureInvalid (or
    WebhookDeliveryIdMissing) otherwise. `headers` has lower-case names."""
    if scheme == "github":
        return _github(secret, headers, body)
    return _standard(secret, headers, body, now_s)
