-- Progress counts kept beside the rows they count (issue 35), so `status`, the live server and
-- a resumed run's start read a few hundred rows instead of joining every trial with every
-- response and attempt. The code that inserts trial rows, attempts and responses
-- (store/progress_counts.py, called by store/writer.py and store/plans.py) adds each batch's
-- change in the transaction that stores the batch, so a crash loses counts and rows together.
--
-- `progress_counts`: one row per origin run of the trials (`trial_rows.run_id`: plans find
-- their trials by it), model, experiment and language. `planned` trials; `answered`, those
-- with a response; `failed`, those without one that have a fatal or given-up attempt (the
-- `progress` view's definition); and the answered responses' usage (a trial key hashes its
-- model id, so the model that answered is the trial's model). Costs are summed as decimals, so
-- the total is the same whichever batches added it, and a recount agrees to the last digit.
-- OR REPLACE: a store whose schema_version was wound back by hand upgrades again cleanly, its
-- counts recounted from the rows it holds then.
CREATE OR REPLACE TABLE progress_counts (
    run_id VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    experiment VARCHAR NOT NULL,
    language VARCHAR NOT NULL,
    planned BIGINT NOT NULL,
    answered BIGINT NOT NULL,
    failed BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_usd DECIMAL(38, 18) NOT NULL
);

-- Attempts by the run that made them, model and outcome (`status` shows retries and errors).
CREATE OR REPLACE TABLE attempt_counts (
    run_id VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    outcome VARCHAR NOT NULL,
    attempts BIGINT NOT NULL
);

-- How many rows of each counted table the counts have seen. DuckDB knows a table's row count
-- without scanning it, so a reader tells in constant time whether the tables were edited
-- outside ibias (rows deleted by hand) and the counts must be rebuilt or bypassed.
CREATE OR REPLACE TABLE progress_rows (
    trial_rows BIGINT NOT NULL,
    responses BIGINT NOT NULL,
    attempts BIGINT NOT NULL
);

-- Each trial's group under the MD5 of its key (`md5_number`, 128 bits): the writer finds the
-- groups of a flush's responses here, scanning 16-byte numbers rather than the 64-character
-- keys of `trial_rows`. One row per trial row, inserted with it.
CREATE OR REPLACE TABLE trial_index (
    h UHUGEINT NOT NULL,
    run_id VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    experiment VARCHAR NOT NULL,
    language VARCHAR NOT NULL
);

INSERT INTO trial_index
SELECT md5_number(trial_key), run_id, model_id, experiment, language FROM trial_rows;

-- Backfill: the same recount as store/progress_counts.py `rebuild`. One row per trial key, as
-- the `progress` view always counted them (stores from before the writer's anti-joins may hold
-- a trial or a response twice), and one response per trial.
INSERT INTO progress_counts
SELECT
    t.run_id,
    t.model_id,
    t.experiment,
    t.language,
    count(*),
    count(r.trial_key),
    count(*) FILTER (WHERE r.trial_key IS NULL AND f.trial_key IS NOT NULL),
    coalesce(sum(r.prompt_tokens), 0),
    coalesce(sum(r.completion_tokens), 0),
    coalesce(sum(r.cost_usd::DECIMAL(38, 18)), 0)
FROM (
    SELECT trial_key, min(run_id) AS run_id, model_id, experiment, language
    FROM trial_rows GROUP BY trial_key, model_id, experiment, language
) t
LEFT JOIN (
    SELECT trial_key, min(prompt_tokens) AS prompt_tokens,
        min(completion_tokens) AS completion_tokens, min(cost_usd) AS cost_usd
    FROM responses GROUP BY trial_key
) r ON r.trial_key = t.trial_key
LEFT JOIN (
    SELECT DISTINCT trial_key FROM attempts WHERE outcome IN ('fatal', 'gave_up')
) f ON f.trial_key = t.trial_key
GROUP BY ALL;

INSERT INTO attempt_counts
SELECT run_id, model_id, outcome, count(*) FROM attempts GROUP BY ALL;

INSERT INTO progress_rows
SELECT
    (SELECT count(*) FROM trial_rows),
    (SELECT count(*) FROM responses),
    (SELECT count(*) FROM attempts);

-- The documented view keeps its columns and rows, now read from the counts.
CREATE OR REPLACE VIEW progress AS
SELECT
    experiment,
    model_id,
    language,
    sum(planned)::BIGINT AS planned,
    sum(answered)::BIGINT AS done,
    sum(failed)::BIGINT AS failed
FROM progress_counts
GROUP BY ALL
HAVING sum(planned) > 0
ORDER BY ALL;
