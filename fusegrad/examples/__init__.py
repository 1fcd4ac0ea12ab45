"""Small runnable programs, `python -m fusegrad.examples.<name>`: each takes `--help`; a smoke test runs them."""
