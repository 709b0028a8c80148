"""Where a run's figures go besides its record: the CSV log, W&B, and quieting library output."""
