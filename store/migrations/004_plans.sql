-- Plans: a run whose plan inputs hash to a completed plan skips planning and finds what is left
-- in the store (runner/plan.py says what the hash covers). A run that plans records a 'started'
-- row first and a 'complete' row once every trial of the plan is stored. The trials of a plan
-- are those its planning runs inserted (trials.run_id) and those listed in plan_trials: keys
-- that an earlier run, of another plan or an import, had already stored.
CREATE TABLE plans (
    plan_hash VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    state VARCHAR NOT NULL,  -- started | complete
    trials BIGINT,           -- when complete: how many trials the plan has
    inputs JSON NOT NULL,    -- digest of each input, to tell why a later run planned again
    recorded_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE plan_trials (
    plan_hash VARCHAR NOT NULL,
    trial_key VARCHAR NOT NULL
);

-- Which plan each run worked from (NULL for imports and for runs before this migration).
ALTER TABLE runs ADD COLUMN plan_hash VARCHAR;
