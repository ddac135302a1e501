"""Memory across runs: what one search learned (best kernels, edits that paid, failures and
their fixes), kept in a local SQLite file and recalled for similar tasks (docs/memory.md)."""
