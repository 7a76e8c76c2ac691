"""Client runtime outside the UI: the headless driver that prints a session's events and feeds
its -c commands, and the feeder both it and the UI's headless modes use."""
