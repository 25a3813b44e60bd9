"""`python -m tuneup.worker SPEC.json`: run one probe in this process (see main.py);
`python -m tuneup.worker --serve`: run the probes whose spec paths arrive on stdin (serve.py)."""

import sys

from tuneup.worker import serve
from tuneup.worker.main import exit_with, main

if __name__ == "__main__":
    exit_with(serve.main() if "--serve" in sys.argv[1:] else main())
