"""Load: every complete run read into one convention (distances on the unit square, old record units converted
here and only here) and grouped by data set, model, cell and settings."""
