"""A module next to io_argv.py: importable because the script's folder is on sys.path."""

VALUE = 42
