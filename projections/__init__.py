"""Projections: pure folds over the ledger, hosted by Faust."""
