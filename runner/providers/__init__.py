"""runner/providers."""
