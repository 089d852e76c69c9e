"""run: TODO docstring."""
