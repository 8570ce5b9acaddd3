"""Connectors: sources and sinks of collections, generators, text, JSON lines, CSV, Parquet, PostgreSQL."""
