-- Provider batches (issue 25): one row per event in a batch's life, never updated, so the
-- store stays append-only and a crash at any point leaves a readable history. A batch is named
-- by `intent_id` (ours, made before anything is uploaded) from its first row, the intent to
-- submit, which holds its trial keys; later rows add what the provider said: the input file
-- (`uploaded`), the provider's batch id (`submitted`), its state as polled (`validating`,
-- `in_progress`, `finalizing`, `cancelling`, ...), its end (`completed`, `expired`,
-- `cancelled`, `failed`), and `ingested` once its results are stored, or `abandoned` when a
-- crash left an intent the provider never saw. The newest row of an intent is its state
-- (view `batch_state`). Counts are the provider's (total, completed, failed).
CREATE TABLE batches (
    intent_id VARCHAR NOT NULL,
    provider VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    state VARCHAR NOT NULL,
    batch_id VARCHAR,
    input_file_id VARCHAR,
    trial_keys VARCHAR[],
    requests INTEGER,
    completed INTEGER,
    failed INTEGER,
    detail VARCHAR,
    seq INTEGER NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE VIEW batch_state AS
SELECT
    i.intent_id,
    i.provider,
    i.model_id,
    i.recorded_at AS intended_at,
    i.requests,
    last.state,
    (SELECT max_by(b.batch_id, b.seq) FILTER (WHERE b.batch_id IS NOT NULL)
        FROM batches b WHERE b.intent_id = i.intent_id) AS batch_id,
    (SELECT max_by(b.input_file_id, b.seq) FILTER (WHERE b.input_file_id IS NOT NULL)
        FROM batches b WHERE b.intent_id = i.intent_id) AS input_file_id,
    last.completed,
    last.failed,
    last.detail,
    last.recorded_at AS updated_at
FROM batches i
JOIN (
    SELECT intent_id, max_by(state, seq) AS state, max_by(completed, seq) AS completed,
        max_by(failed, seq) AS failed, max_by(detail, seq) AS detail, max(recorded_at) AS recorded_at
    FROM batches GROUP BY intent_id
) last ON last.intent_id = i.intent_id
WHERE i.state = 'intent';
