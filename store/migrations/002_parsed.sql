-- Derived tables (insert-only, keyed by trial_key and parser_version) and the analysis views.
-- The views pick each trial's newest parser version, so they work from any DuckDB client.
CREATE TABLE parsed_word_association (
    trial_key VARCHAR NOT NULL,
    parser_version INTEGER NOT NULL,
    n_pos_target INTEGER NOT NULL,
    n_neg_target INTEGER NOT NULL,
    n_pos_reference INTEGER NOT NULL,
    n_neg_reference INTEGER NOT NULL,
    n_unassigned INTEGER NOT NULL,
    bias DOUBLE,
    refused BOOLEAN NOT NULL,
    assignments JSON,
    parsed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE parsed_allocation (
    trial_key VARCHAR NOT NULL,
    parser_version INTEGER NOT NULL,
    chosen VARCHAR NOT NULL,
    chosen_position INTEGER,
    none_reason VARCHAR,
    explanation_text VARCHAR,
    parsed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE parsed_explicit (
    trial_key VARCHAR NOT NULL,
    parser_version INTEGER NOT NULL,
    answer VARCHAR NOT NULL,
    parsed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE VIEW word_association_trials AS
WITH p AS (
    SELECT * FROM parsed_word_association
    QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY parser_version DESC) = 1
)
SELECT
    t.trial_key,
    t.model_id,
    t.language,
    t.item ->> 'category' AS category,
    CAST(t.item ->> 'template' AS INTEGER) AS template,
    CAST(t.item ->> 'trial_index' AS INTEGER) AS trial_index,
    p.n_pos_target,
    p.n_neg_target,
    p.n_pos_reference,
    p.n_neg_reference,
    p.n_unassigned,
    p.bias,
    p.refused,
    p.parser_version
FROM trials t
JOIN responses r ON r.trial_key = t.trial_key
JOIN p ON p.trial_key = t.trial_key
WHERE t.experiment = 'word_association';

CREATE VIEW allocation_decisions AS
WITH p AS (
    SELECT * FROM parsed_allocation
    QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY parser_version DESC) = 1
)
SELECT
    t.trial_key,
    t.model_id,
    t.language,
    t.item ->> 'service' AS service,
    CAST(t.item ->> 'explanation' AS BOOLEAN) AS explanation,
    t.item ->> 'symptoms' AS symptoms,
    t.item ->> 'pair_id' AS pair_id,
    t.item ->> 'first' AS first,
    p.chosen,
    p.chosen_position,
    p.none_reason,
    p.explanation_text,
    p.parser_version
FROM trials t
JOIN responses r ON r.trial_key = t.trial_key
JOIN p ON p.trial_key = t.trial_key
WHERE t.experiment = 'allocation';

CREATE VIEW explicit_answers AS
WITH p AS (
    SELECT * FROM parsed_explicit
    QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY parser_version DESC) = 1
)
SELECT
    t.trial_key,
    t.model_id,
    t.language,
    t.experiment,
    coalesce(t.item ->> 'subject', t.item ->> 'category', t.item ->> 'service') AS subject,
    p.answer,
    r.content,
    p.parser_version
FROM trials t
JOIN responses r ON r.trial_key = t.trial_key
JOIN p ON p.trial_key = t.trial_key
WHERE t.experiment IN ('word_association_explicit', 'allocation_explicit');
