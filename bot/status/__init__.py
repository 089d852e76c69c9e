"""status: TODO docstring."""
