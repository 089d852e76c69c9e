"""plan: TODO docstring."""
