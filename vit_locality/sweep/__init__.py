"""A sweep of cells: what the command hands each cell's process (command.py), where each cell runs, the progress of
the sweep, and its verdict."""
