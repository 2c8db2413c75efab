"""What several test modules share: fixtures, numpy references, and ways to run code in fresh
processes or on loopback clusters. tests/ is on sys.path (pyproject.toml's pytest `pythonpath`),
so test modules import these as `helpers.<module>`."""
