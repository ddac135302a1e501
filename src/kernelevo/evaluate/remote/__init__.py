"""Judging elsewhere: the evaluation service, its client, and a Dask cluster."""
