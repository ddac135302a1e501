"""The children's code: the oracle's and the worker's processes and what they run."""
