-- One outcome per reply, the same for every provider (store/outcome.py): 'answered', 'empty'
-- (no text: Gemini's MAX_TOKENS after thinking, RECITATION, OTHER; an Anthropic reply with only
-- a thinking block; OpenAI's "" or null content), with `outcome_reason` saying why, or
-- 'refused' (the provider said so). Stored rows get it derived from their content, refusal,
-- finish reason and reasoning, by the same rule the writer applies to new rows; nothing else
-- of theirs changes. Before this, an empty reply with NULL content was read as a refusal.
-- Beside it, usage as sent: prompt tokens read from and written to the provider's cache (both
-- already inside prompt_tokens; priced at the config's cache prices when it gives them).
ALTER TABLE responses ADD COLUMN cache_read_tokens INTEGER;
ALTER TABLE responses ADD COLUMN cache_write_tokens INTEGER;
ALTER TABLE responses ADD COLUMN outcome VARCHAR;
ALTER TABLE responses ADD COLUMN outcome_reason VARCHAR;
UPDATE responses SET
    outcome = CASE WHEN coalesce(content, '') <> '' THEN 'answered'
        WHEN finish_reason = 'content_filter' OR refusal IS NOT NULL THEN 'refused'
        ELSE 'empty' END,
    outcome_reason = CASE WHEN coalesce(content, '') <> ''
            OR finish_reason = 'content_filter' OR refusal IS NOT NULL THEN NULL
        WHEN finish_reason IS NOT NULL AND finish_reason <> 'stop' THEN finish_reason
        WHEN coalesce(reasoning_content, '') <> '' THEN 'thinking_only'
        ELSE 'no_text' END;
