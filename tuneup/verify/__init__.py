"""`tuneup verify DIR`: the recommendation and the baseline run as the user will run them,
their real speedup set beside the ladder's claim."""
