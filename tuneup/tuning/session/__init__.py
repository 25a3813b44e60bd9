"""A session's life: its request, assembly, resume, engine, lock and control."""
