"""publish: TODO docstring."""
