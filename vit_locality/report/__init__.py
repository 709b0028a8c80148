"""Tables and figures from run directories alone, in three layers that import downwards only: load, stats, render."""
