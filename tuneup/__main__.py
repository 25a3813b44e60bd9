"""`python -m tuneup` runs the same entry point as the `tuneup` console script."""

from tuneup.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
