"""`python -m vit_locality.bench`: the whole suite (see suite.py)."""

from .suite import main

main()
