"""The ladder's time: what is left, the plan that fits a budget, what ladders cost here."""
