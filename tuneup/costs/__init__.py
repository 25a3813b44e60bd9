"""The price of a probe and a ladder in seconds: one room for the models and their types.

`estimate` prices probes and ladders from a step model and what is known; `one_time` is
what a probe pays beyond its timed steps (process starts, first steps, compiles);
`compile_record` remembers a cold compile's cost for the warm probes it spares. Trainers
state their costs in these types; the session's clock (tuning/clock/) spends them.
"""
