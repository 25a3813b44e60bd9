"""What a session keeps: the journal, summary.json, the profiles and reports."""
