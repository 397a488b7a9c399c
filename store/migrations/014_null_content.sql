-- A reply whose content was absent (NULL, not "") though the provider said it stopped normally
-- (`finish_reason = 'stop'`) gets its own `outcome_reason`, `null_content` (issue 33): OpenAI's
-- `content: null` is now stored once its retries run out, and an Anthropic reply with no content
-- block or a Gemini candidate with no parts is the same case. Migration 009 gave these rows
-- `no_text`; this gives them the reason new rows get (store/outcome.py), so one reason counts
-- one case whichever ibias stored it. Only those exact rows change.
UPDATE responses SET outcome_reason = 'null_content'
WHERE outcome = 'empty' AND outcome_reason = 'no_text' AND content IS NULL
  AND finish_reason = 'stop';
