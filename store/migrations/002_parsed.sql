-- Version 2 created the built-in experiments' derived tables and views. They are now declared by
-- the experiment units (prompts/*/unit.py) and created by store/experiments.py with the same
-- DDL, versioned per kind in `experiment_schemas` (migration 003). This step stays so that the
-- numbering of existing stores is unchanged; stores made at version 2 already hold the tables,
-- and the generated DDL only creates what is missing and replaces the views.
SELECT 1;
