"""Plain data that crosses the wire: events, statistics, node info, commands, breakpoint specs,
places, the report schema, the distributed events. No torch and no Textual (a static test checks).
"""
