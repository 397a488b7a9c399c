-- When each `ibias run` ended and how (issue 24): the report's "from ... to ..." line and a
-- researcher's "did that run finish?" read them. `ended_at` is set once, when the run
-- returns (its result computed, the writer flushed); `exit_status` is the command's exit code
-- (0 done, 1 failures or budget, 2 an error, 130 interrupted). Both stay NULL for a run that
-- was killed (kill -9, power loss) or is still running, and for imported replies' rows.
-- This is the one update a `runs` row gets: the rest of the store is insert-only.
-- IF NOT EXISTS: a store whose schema_version was wound back by hand upgrades again cleanly.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS ended_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS exit_status INTEGER;
