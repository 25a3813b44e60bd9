"""A tuning session: many probes assembled, searched, confirmed, guarded, judged and journaled."""
