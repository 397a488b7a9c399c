"""Providers: one registered class per API (see base.py for the contract, registry.py for the
lookup). Importing the package registers the built-in providers."""

from ibias.runner.providers import (  # noqa: F401  (registration)
    anthropic,
    gemini,
    openai,
    simulator,
)
