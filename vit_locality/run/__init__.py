"""Running one cell: build, lock, resume, record, and the sweep's verdict."""
