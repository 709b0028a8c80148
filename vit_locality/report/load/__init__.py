"""Load: every complete run read in the measurement asked for and grouped by data set, model, cell and settings."""
