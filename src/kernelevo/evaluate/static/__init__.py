"""Static honesty checks: what a candidate's source shows before it runs."""
