"""The projections worker: hosts the read models' folds (Faust) over keel.events.v1."""
