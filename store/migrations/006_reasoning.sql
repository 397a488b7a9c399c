-- Reasoning beside the reply: the text a host sent as reasoning (`reasoning_content`, Gemini's
-- thought summaries, Anthropic's thinking blocks) and the reasoning tokens it reported. The
-- reasoning text is never the reply (parsers read `content`); the reasoning tokens are already
-- inside `completion_tokens`, and so inside `cost_usd`, because they are billed as output.
ALTER TABLE responses ADD COLUMN reasoning_content VARCHAR;
ALTER TABLE responses ADD COLUMN reasoning_tokens INTEGER;
