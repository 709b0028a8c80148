"""Tables and figures built from run directories alone (results.json, attention_stats.csv), in three layers that
import downwards only: load (records in one convention, grouped), stats (claims, tests, effects), render (tables,
figures). `python -m vit_locality.report` is the command; the extras package adds instruments, the page and W&B."""
