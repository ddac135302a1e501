"""Pure analysis, used by both sides: decisions, tolerances, costs and profiles."""
