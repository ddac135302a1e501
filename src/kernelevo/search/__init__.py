"""Search: the archive of elites, parent selection, and the evolutionary loop."""
