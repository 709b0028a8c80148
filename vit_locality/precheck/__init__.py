"""The entry points' pre-check: every cell of a command composed, checked and named before the first starts."""
