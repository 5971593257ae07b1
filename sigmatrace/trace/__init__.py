"""The trace directory format: record layouts, the live block, and reading (FORMAT.md)."""
