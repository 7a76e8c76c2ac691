"""The wire between an agent and its clients: framing, the codec of events, DebugTargets."""
