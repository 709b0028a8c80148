"""A sweep of cells: where each cell runs, the progress of the sweep, and its verdict."""
