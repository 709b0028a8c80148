"""Where a run leaves its files: atomic writes, bounded reads, the record and the checkpoints."""
