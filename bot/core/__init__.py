"""core: TODO docstring."""
