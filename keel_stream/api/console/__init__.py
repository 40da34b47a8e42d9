"""The web console over the ledger (served by the API process)."""
