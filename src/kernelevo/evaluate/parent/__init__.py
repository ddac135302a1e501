"""The judge's own process: the Judge, its sessions, and verdicts made from reports."""
