"""The interactive app: set up, tune live and review results (Textual is imported only here)."""
