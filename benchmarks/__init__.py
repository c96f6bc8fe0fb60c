"""Benchmarks and measurements: run them as modules from the repository root,
`python -m benchmarks.<name> --help` (benchmarks/RESULTS.md names each command)."""
