"""The agent: runs in the script's process; serves its session to clients over the wire."""
