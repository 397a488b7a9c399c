-- Whether each imported reply of the paper design was sent the paper's prompt (issue 21).
-- `ibias import --stimuli DIR` renders the paper design's prompt for the item of each new
-- reply it stores and writes one row here: `status` identical / differs / absent (the line
-- carried no messages), `difference` a short kind for a difference (whitespace,
-- block_repeated, messages, other_wording, not_in_pack: prompts/stimuli/prompt_check.py),
-- `template` the word-association template that matched (or was nearest), `stimuli` the pack
-- folder checked against. A reply imported without --stimuli has no row: "not checked".
-- Rows are only inserted, one per trial_key, by the importer's single writer.
CREATE TABLE prompt_checks (
    trial_key VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    difference VARCHAR,
    template INTEGER,
    stimuli VARCHAR NOT NULL,
    checked_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
