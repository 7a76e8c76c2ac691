"""The command line: one module per subcommand (main, attach, replay, export, serve) and the
options the client commands share."""
