"""Configuration: the checks, resolvers, Trainer options, run identity and the command-line pre-check."""
