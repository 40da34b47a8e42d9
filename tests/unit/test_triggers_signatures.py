"""Inbound webhook signatures, checked against the reference Standard Webhooks library and
GitHub's documented scheme."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from keel_stream.errors import WebhookDeliveryIdMissing, WebhookSignatureInvalid
from keel_stream.hooks.envelope import new_secret
from keel_stream.triggers.signatures import Verified, verify

BODY = b'{"action":"opened","number":7}'


def standard_headers(
    secret: str, body: bytes, msg_id: str = "msg_1", at: float | None = None
) -> dict[str, str]:
    when = datetime.fromtimestamp(at if at is not None else time.time(), UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, body.decode()),
    }


def test_a_standard_webhooks_signature_verifies_and_names_the_delivery() -> None:
    secret = new_secret()
    headers = standard_headers(secret, BODY)
    headers["webhook-signature"] = "v1,bm90LWl0 " + headers["webhook-signature"]  # rotation
    assert verify("standard", secret, headers, BODY, time.time()) == Verified("msg_1", "msg_1")


@pytest.mark.parametrize("change", ["body", "secret", "old", "id"])
def test_a_standard_webhooks_request_that_does_not_match_is_refused(change: str) -> None:
    secret = new_secret()
    now = time.time()
    headers = standard_headers(secret, BODY, at=now - 600 if change == "old" else now)
    body = BODY + b" " if change == "body" else BODY
    if change == "id":
        headers["webhook-id"] = "msg_2"
    with pytest.raises(WebhookSignatureInvalid):
        verify("standard", new_secret() if change == "secret" else secret, headers, body, now)


def test_github_signature_verifies_with_the_secret_text() -> None:
    secret = new_secret()
    signature = "sha256=" + hmac.new(secret.encode(), BODY, hashlib.sha256).hexdigest()
    headers = {"x-hub-signature-256": signature, "x-github-delivery": "d-1"}
    digest = hashlib.sha256(BODY).hexdigest()
    assert verify("github", secret, headers, BODY, 0) == Verified(f"sha256:{digest}", "d-1")
    with pytest.raises(WebhookSignatureInvalid):
        verify("github", secret, {**headers, "x-hub-signature-256": "sha256=00"}, BODY, 0)


def test_a_request_without_a_delivery_id_is_refused() -> None:
    secret = new_secret()
    headers = standard_headers(secret, BODY)
    del headers["webhook-id"]
    with pytest.raises(WebhookDeliveryIdMissing):
        verify("standard", secret, headers, BODY, time.time())
    with pytest.raises(WebhookDeliveryIdMissing):
        verify("github", secret, {"x-hub-signature-256": "x"}, BODY, 0)
