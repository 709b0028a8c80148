"""Tables and figures built from run directories alone (results.json, attention_stats.csv)."""
