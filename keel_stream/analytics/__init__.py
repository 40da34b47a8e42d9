"""Reference analytics consumers of keel.events.v1."""

from keel_stream.analytics.dedupe import SeqDeduplicator
from keel_stream.analytics.tail import TailOptions, tail

__all__ = ["SeqDeduplicator", "TailOptions", "tail"]
