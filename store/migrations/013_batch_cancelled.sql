-- One spelling of a cancelled batch request's `attempts.error_kind` (issue 33): Anthropic's
-- Message Batches call a request that never ran because its batch was cancelled `canceled`,
-- OpenAI and Gemini `cancelled`, and ibias stored each as the provider spelled it. The batch
-- engine now writes `batch_cancelled` whatever the provider; this rewrites the rows stored
-- before, so a `GROUP BY error_kind` counts one kind. Only that exact value changes.
UPDATE attempts SET error_kind = 'batch_cancelled' WHERE error_kind = 'batch_canceled';
