"""The command-line front ends, one module per subcommand;
tuneup.cli parses and dispatches to them."""
