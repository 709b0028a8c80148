"""Instruments asking why the protocol makes attention local (docs/instruments.md), from run directories alone."""
