"""sandbox: TODO docstring."""
