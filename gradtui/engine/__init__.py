"""The engine: capture, step, edit and report backward passes. Uses torch and networkx only."""
