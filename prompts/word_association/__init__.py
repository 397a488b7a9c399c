"""The word-association experiment (after Bai et al. 2025) and its explicit check.

Modules, one job each: `data` (data files), `settings` (config table), `experiment` (planning),
`text` and `labels` (folding and label spellings), `parse` (replies), `score` (the bias score),
`simulate` (a simulated model's replies). Content lives in `prompts/data/word_association/`.
"""
