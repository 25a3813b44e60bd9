"""The probe worker: the child process that measures one probe; the only side
that runs torch for the probes."""
