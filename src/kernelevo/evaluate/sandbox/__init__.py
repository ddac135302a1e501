"""Untrusted work in its own process: limits, confinement, and what it may say."""
