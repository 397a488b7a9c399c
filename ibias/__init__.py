"""ibias: measure implicit bias of LLMs toward transgender people, at scale, reproducibly.

The project's folders (`runner/`, `prompts/`, `store/`, `analysis/`, `configs/`) stay at the top
of the repository and install only as `ibias.runner`, `ibias.prompts`, ...: this package holds
symbolic links to them, so an editable install, a wheel, mypy and pytest all see one namespace
and no generic top-level module such as `runner` or `store`.
"""
