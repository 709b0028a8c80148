"""Attention statistics: the metrics (pure torch), the probe, their logs and pictures."""
