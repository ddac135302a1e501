"""The judge: candidates checked, run and timed in their own processes."""
