-- Each spec's texts once (issue 12). A spec is sent to every model of a plan, and its coords,
-- item and messages (about 1.6 KB of JSON in the paper's grid) were stored again in the row of
-- every one of its trials: writing that text seven times was most of the cost of planning.
-- `trial_specs` holds them once per spec, named by `spec_key` (the first 32 hex digits of the
-- SHA-256 of the canonical JSON of everything of a trial but the model; store/specs.py says
-- why 128 bits); `trial_rows` holds one row per trial, in insertion (plan) order, naming its
-- spec. `trials` becomes a view with the columns, names, types and order of the table it
-- replaces, so users' SQL and every view over it work unchanged. As before, rows are only
-- inserted, and uniqueness (one row per trial_key in `trial_rows`, one per spec_key in
-- `trial_specs`) is kept by the single writer's anti-joins rather than by indexes.
--
-- The texts are compressed with zstd: JSON compresses well with it, and DuckDB's default choice
-- for these columns (dictionary and FSST) wrote the paper's specs twice as slowly into a file
-- five times larger (bench/BENCHMARKS.md, "Planning the paper's grid").
CREATE TABLE trial_specs (
    spec_key VARCHAR NOT NULL,
    coords JSON NOT NULL USING COMPRESSION zstd,
    item JSON NOT NULL USING COMPRESSION zstd,
    messages JSON NOT NULL USING COMPRESSION zstd
);

CREATE TABLE trial_rows (
    trial_key VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    experiment VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    language VARCHAR NOT NULL,
    spec_key VARCHAR NOT NULL,
    params JSON NOT NULL,
    replicate INTEGER NOT NULL
);

-- A stored row's spec key, from its own stored texts: store/specs.py's `spec_key`, the first
-- 32 hex digits of the SHA-256 of `spec_json` (experiment and language are plain identifiers,
-- which to_json quotes as orjson does). Defined once, for the two copies below.
CREATE TEMPORARY MACRO _spec_key(coords, experiment, item, language, messages, replicate) AS
    left(sha256(
        '{"coords":' || coords || ',"experiment":' || to_json(experiment) || ',"item":' || item
        || ',"language":' || to_json(language) || ',"messages":' || messages
        || ',"replicate":' || CAST(replicate AS VARCHAR) || '}'
    ), 32);

-- An existing store's rows, copied in rowid order (a plain scan keeps insertion order), each
-- naming its spec by the key of its own stored texts; equal texts give equal keys, so every
-- row reads back exactly as it was.
INSERT INTO trial_rows
SELECT
    trial_key,
    run_id,
    experiment,
    model_id,
    language,
    _spec_key(coords, experiment, item, language, messages, replicate),
    params,
    replicate
FROM trials;

-- Each spec once: the texts of its first row (the rows of one spec hold the same texts), in
-- the order specs first appear.
INSERT INTO trial_specs
SELECT
    _spec_key(coords, experiment, item, language, messages, replicate),
    coords,
    item,
    messages
FROM trials
WHERE rowid IN (
    SELECT min(rowid)
    FROM trials
    GROUP BY _spec_key(coords, experiment, item, language, messages, replicate)
);

DROP MACRO _spec_key;

-- DuckDB binds views when they are queried, so the views that name `trials` (progress, the
-- experiments' views, replies) read the view below from now on.
DROP TABLE trials;

CREATE VIEW trials AS
SELECT
    r.trial_key,
    r.run_id,
    r.experiment,
    r.model_id,
    r.language,
    s.coords,
    s.item,
    s.messages,
    r.params,
    r.replicate
FROM trial_rows r
JOIN trial_specs s ON s.spec_key = r.spec_key;

-- `progress` needs no text of a trial: it reads the trial rows alone, answering as before.
CREATE OR REPLACE VIEW progress AS
SELECT
    t.experiment,
    t.model_id,
    t.language,
    count(*) AS planned,
    count(r.trial_key) AS done,
    count(*) FILTER (WHERE r.trial_key IS NULL AND f.trial_key IS NOT NULL) AS failed
FROM (SELECT DISTINCT trial_key, experiment, model_id, language FROM trial_rows) t
LEFT JOIN (SELECT DISTINCT trial_key FROM responses) r ON r.trial_key = t.trial_key
LEFT JOIN (
    SELECT DISTINCT trial_key FROM attempts WHERE outcome IN ('fatal', 'gave_up')
) f ON f.trial_key = t.trial_key
GROUP BY ALL
ORDER BY ALL;
