-- What providers reported per model, kept beside the responses (issue 35), so `ibias status`
-- and the live server say which model names and system fingerprints answered each model
-- without grouping every response (store/drift.py `model_drift`). The writer's
-- `insert_responses` adds each batch's change in the transaction that stores the batch
-- (store/drift.py `responses_added`, called from store/progress_counts.py), so a crash loses
-- counts and rows together; `progress_rows.responses` (016) tells when rows were edited by
-- hand and the counts must be bypassed or rebuilt.
--
-- One row per model, reported model name and system fingerprint (either may be NULL, not
-- both): the responses that reported them and the first and last time one was received.
-- OR REPLACE: a store whose schema_version was wound back by hand upgrades again cleanly.
CREATE OR REPLACE TABLE reported_counts (
    model_id VARCHAR NOT NULL,
    provider_model VARCHAR,
    system_fingerprint VARCHAR,
    responses BIGINT NOT NULL,
    first_at TIMESTAMPTZ NOT NULL,
    last_at TIMESTAMPTZ NOT NULL
);

-- Backfill: the same recount as store/drift.py `RECOUNT_SQL`.
INSERT INTO reported_counts
SELECT model_id, provider_model, system_fingerprint, count(*), min(received_at), max(received_at)
FROM responses
WHERE provider_model IS NOT NULL OR system_fingerprint IS NOT NULL
GROUP BY ALL;
