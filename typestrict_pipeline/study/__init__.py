"""Studies: a search over candidates and time folds, ranked honestly (no Dagster import here)."""
