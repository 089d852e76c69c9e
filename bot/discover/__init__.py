"""discover: TODO docstring."""
