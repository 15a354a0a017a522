"""The ingest layer: files -> format detection -> parsers -> canonical tables -> clock alignment, within a memory budget."""
