"""Render: the tables (Markdown, LaTeX, CSV) and figures of the load and statistics layers."""
