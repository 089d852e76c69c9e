"""build: TODO docstring."""
