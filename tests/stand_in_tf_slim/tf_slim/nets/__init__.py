"""Stand-in (tests only)."""
