-- What kind of store this is, recorded in the store itself (issue 34): a rehearsal's store
-- (`ibias run CONFIG --rehearse`, every model answered by the built-in simulator) carries the
-- mark `rehearsal`, so `run` refuses to rehearse into a real store or really run into a
-- rehearsal store whatever the file is named, and analysis says its replies are simulated.
-- One row per mark, inserted once when the store is first used that way and never updated
-- (the store stays insert-only); `detail` says who set it (e.g. the config's path).
CREATE TABLE IF NOT EXISTS store_marks (
    mark VARCHAR NOT NULL PRIMARY KEY,
    detail VARCHAR,
    set_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
