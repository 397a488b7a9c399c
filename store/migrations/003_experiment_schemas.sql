-- Which version of each experiment kind's derived table and view this store holds (see
-- prompts/registry.py): one row per application; the newest row per name is in force.
CREATE TABLE experiment_schemas (
    name VARCHAR NOT NULL,
    version INTEGER NOT NULL,
    ddl_hash VARCHAR NOT NULL,
    explicit_subject VARCHAR,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
