"""Proposers: LLM mutation, repair, and the zero-token tuner."""
