"""Triggers: schedules and inbound webhooks that commit input into sessions (docs/triggers.md).

A leased scheduler claims due triggers, records each nominal time's firing with its decision
in one transaction, and commits a `user.message` keyed `trigger:{id}:{nominal time}`: the
ledger's one-fact-per-key rule makes every firing happen once, whatever crashes or races.
"""
