"""Statistics: the paper's claims, the equivalence test, contrasts and main effects on the load layer's groups."""
