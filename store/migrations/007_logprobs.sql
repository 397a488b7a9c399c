-- Token logprobs beside the reply, for models that opted in (`logprobs = true`): OpenAI's
-- `choices[0].logprobs.content` as sent, one object per token ({token, logprob, top_logprobs:
-- [{token, logprob}]}). NULL when they were not asked for. Kept here rather than in `raw`, which
-- then omits them, so a body is stored once; the allocation's choice probabilities are derived
-- from this column (table `allocation_logprobs`).
ALTER TABLE responses ADD COLUMN logprobs JSON;
