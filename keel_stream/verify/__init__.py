"""`keel-stream verify`: proof that the events topic and the read models agree with the ledger."""

from keel_stream.store.verify_reads import Scope
from keel_stream.verify.report import Check, Difference, Row, VerifyReport
from keel_stream.verify.run import VerifyOptions, verify

__all__ = ["Check", "Difference", "Row", "Scope", "VerifyOptions", "VerifyReport", "verify"]
