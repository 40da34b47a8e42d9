"""Topic catalog and record schemas (see docs/topics.md once the relay lands)."""
