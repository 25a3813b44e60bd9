"""`python -m tuneup.worker SPEC.json`: run one probe in this process (see main.py)."""

from tuneup.worker.main import exit_with, main

if __name__ == "__main__":
    exit_with(main())
