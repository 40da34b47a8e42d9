"""The Standard Webhooks envelope: ids, bodies, secrets and signatures.

`webhook-id` is derived from (tenant, session, seq, hook, decision id), so one hook event has
one id across retries, relay duplicates, redeliveries and replays: receivers de-duplicate on it.
It holds no `.` (the signed content is `{id}.{timestamp}.{body}`). The timestamp and signature
belong to each attempt and are computed when it is sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import orjson

__all__ = [
    "SECRET_PREFIX",
    "body_of",
    "iso_timestamp",
    "new_secret",
    "signature_header",
    "webhook_id",
]

SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - the format's prefix, not a secret
_SECRET_BYTES: Final = 32
_ID_CHARS: Final = 32
"""Characters of base32 kept: 160 bits of the SHA-256."""


def webhook_id(tenant: str, session: str, seq: int, hook: str, decision_id: str = "") -> str:
    """`evt_` and 32 lower-case base32 characters of the SHA-256 of the parts (NUL-separated:
    identifiers never hold a NUL, so two different tuples never join to the same text)."""
    joined = "\0".join((tenant, session, str(seq), hook, decision_id)).encode()
    digest = base64.b32encode(hashlib.sha256(joined).digest()).decode().lower()
    return f"evt_{digest[:_ID_CHARS]}"


def iso_timestamp(value: datetime | str) -> str:
    """A committedAt as the events topic writes it (UTC, `Z`), from a record's text or a row."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_UTC_Z).decode().strip('"')


def body_of(
    hook: str,
    committed_at: datetime | str,
    base: Mapping[str, Any],
    data: Mapping[str, Any],
) -> str:
    """The request body, `{"type", "timestamp", "data"}`, as the exact text that is signed."""
    document = {
        "type": hook,
        "timestamp": iso_timestamp(committed_at),
        "data": {**base, **data},
    }
    return orjson.dumps(document).decode()


def new_secret() -> str:
    """A fresh endpoint secret: `whsec_` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature_header(secrets_: Iterable[str], message_id: str, timestamp: int, body: str) -> str:
    """`v1,<base64 HMAC-SHA256>` per secret, space-separated (two during a rotation)."""
    signed = f"{message_id}.{timestamp}.{body}".encode()
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets_
    )
