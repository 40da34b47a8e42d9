"""The kernel: pure rules of the ledger, no I/O."""

from keel_stream.kernel.canonical import canonical_json, payload_digest, same_payload
from keel_stream.kernel.commits import PreparedCommit, check_identifier, prepare, require_edge_kind
from keel_stream.kernel.delivery import Delivery, effective_delivery, with_effective_delivery
from keel_stream.kernel.inputs import (
    InputAccount,
    InputTally,
    account_inputs,
    is_terminal_failure,
)
from keel_stream.kernel.status import AttemptOutcome, RunStatus, finish_status
from keel_stream.kernel.types import CommitRequest, Event, EventLike, LeaseToken, Submission
from keel_stream.kernel.validation import validate_payload
from keel_stream.kernel.vocabulary import (
    EDGE_KINDS,
    REGISTRY,
    CommitClass,
    Kind,
    KindSpec,
    StateOwner,
    StopReason,
    spec_for,
)

__all__ = [
    "EDGE_KINDS",
    "REGISTRY",
    "AttemptOutcome",
    "CommitClass",
    "CommitRequest",
    "Delivery",
    "Event",
    "EventLike",
    "InputAccount",
    "InputTally",
    "Kind",
    "KindSpec",
    "LeaseToken",
    "PreparedCommit",
    "RunStatus",
    "StateOwner",
    "StopReason",
    "Submission",
    "account_inputs",
    "canonical_json",
    "check_identifier",
    "effective_delivery",
    "finish_status",
    "is_terminal_failure",
    "payload_digest",
    "prepare",
    "require_edge_kind",
    "same_payload",
    "spec_for",
    "validate_payload",
    "with_effective_delivery",
]
