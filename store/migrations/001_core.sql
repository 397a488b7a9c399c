-- Core tables of DESIGN.md. Rows are only inserted; uniqueness of trials and responses per
-- trial_key is enforced by the single writer's anti-join inserts (DuckDB's ART indexes would
-- cost memory proportional to the grid, and a 1M-trial plan must stay small).
CREATE TABLE runs (
    run_id VARCHAR NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    config VARCHAR NOT NULL,
    config_hash VARCHAR NOT NULL,
    version VARCHAR NOT NULL,
    git_rev VARCHAR,
    command VARCHAR
);

CREATE TABLE trials (
    trial_key VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    experiment VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    language VARCHAR NOT NULL,
    coords JSON NOT NULL,
    item JSON NOT NULL,
    messages JSON NOT NULL,
    params JSON NOT NULL,
    replicate INTEGER NOT NULL
);

CREATE TABLE patients (
    roster_id VARCHAR NOT NULL,
    person_id VARCHAR NOT NULL,
    language VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    age INTEGER NOT NULL,
    sex_assigned_at_birth VARCHAR NOT NULL,
    gender_identity VARCHAR NOT NULL
);

CREATE TABLE attempts (
    run_id VARCHAR NOT NULL,
    trial_key VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    attempt_no INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    latency_ms DOUBLE,
    http_status INTEGER,
    error_kind VARCHAR,
    error_message VARCHAR,
    outcome VARCHAR NOT NULL  -- ok | retry | fatal | gave_up | cancelled
);

CREATE TABLE responses (
    trial_key VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    provider_model VARCHAR,
    content VARCHAR,
    refusal VARCHAR,
    finish_reason VARCHAR,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost_usd DOUBLE,
    system_fingerprint VARCHAR,
    received_at TIMESTAMPTZ NOT NULL,
    raw JSON
);

CREATE VIEW progress AS
SELECT
    t.experiment,
    t.model_id,
    t.language,
    count(*) AS planned,
    count(r.trial_key) AS done,
    count(*) FILTER (WHERE r.trial_key IS NULL AND f.trial_key IS NOT NULL) AS failed
FROM (SELECT DISTINCT trial_key, experiment, model_id, language FROM trials) t
LEFT JOIN (SELECT DISTINCT trial_key FROM responses) r ON r.trial_key = t.trial_key
LEFT JOIN (
    SELECT DISTINCT trial_key FROM attempts WHERE outcome IN ('fatal', 'gave_up')
) f ON f.trial_key = t.trial_key
GROUP BY ALL
ORDER BY ALL;
