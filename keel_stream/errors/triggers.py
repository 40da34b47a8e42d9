"""The triggers' errors."""

from __future__ import annotations

from keel_stream.errors.base import Conflict, InvalidRequest, KeelError, NotFound

__all__ = [
    "InvalidTrigger",
    "NotWebhookTrigger",
    "TriggerLimitReached",
    "TriggerNotFound",
    "TriggerPaused",
    "WebhookDeliveryIdMissing",
    "WebhookSignatureInvalid",
]


class InvalidTrigger(InvalidRequest):
    """A trigger that breaks a rule: a bad cron, zone, interval, target, template or policy."""

    code = "invalid_trigger"


class WebhookDeliveryIdMissing(InvalidRequest):
    """An inbound webhook without the delivery id its scheme names (nothing to de-duplicate on)."""

    code = "webhook_delivery_id_missing"


class TriggerNotFound(NotFound):
    """No such trigger (or it belongs to another tenant)."""

    code = "trigger_not_found"


class TriggerLimitReached(Conflict):
    """The tenant has as many triggers as it may."""

    code = "trigger_limit_reached"


class TriggerPaused(Conflict):
    """An inbound webhook for a trigger that is paused (or completed): nothing was fired."""

    code = "trigger_paused"


class NotWebhookTrigger(Conflict):
    """An inbound webhook for a schedule trigger."""

    code = "trigger_not_webhook"


class WebhookSignatureInvalid(KeelError):
    """An inbound webhook whose signature (or timestamp) does not verify under the trigger's
    secret; nothing was fired."""

    code = "webhook_signature_invalid"
