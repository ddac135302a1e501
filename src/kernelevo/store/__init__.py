"""The durable run store: one SQLite file per run, its schema, records and reads."""
