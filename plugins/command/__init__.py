"""The `command` trainer: tune any training script by running it and reading its output.

A preset's ``command:`` section says how to run the script and how each knob
reaches it (a command-line flag or an environment variable); each probe runs
the command as a child process with a time limit and reads samples/s from
what it prints. A module per job:

- section.py: the ``command:`` section, checked and parsed into a CommandSpec;
- invocation.py: one probe's arguments and environment from its knob values;
- output.py: samples/s, losses and benchy's lines read from the output;
- run.py: one probe run through tuneup's ProbeRunner, and how it ended;
- export.py: a finished session exported as the user's own command;
- adapter.py: the `TrainerAdapter` registered as ``command`` (entry point).
"""
