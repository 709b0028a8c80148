"""Benchmarks of the checkout (not installed): `python -m benchmarks`, `make bench`, `make bench-gpu`."""
