"""Statistics: the paper's claims judged by stated rules, the equivalence test, each cell against Baseline and the
factorial main effects, on the groups the load layer made."""
