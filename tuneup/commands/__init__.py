"""The command-line front ends, one module per subcommand;
cli.py parses and dispatches to them."""
