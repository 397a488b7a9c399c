"""Provider batch APIs: a model's remaining trials sent as provider batches at the batch price,
submitted idempotently and reconciled after a crash (runner/batch/engine.py)."""
