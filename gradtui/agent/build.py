"""The one builder of a run's session from its RunOptions (every mode: headless, the UI's child
agent, --listen, gradtui.listen())."""

from __future__ import annotations

from typing import Any

from gradtui.model.options import RunOptions

def build_session(options: RunOptions, *listeners: Any):
    """The session for `options`, with its breakpoints armed and `listeners` attached."""
    from gradtui.engine.session import Session

    session = Session(full_stats=options.full_stats, hook_all_passes=options.hook_all_passes,
                      flow_unhooked=options.flow_unhooked,
                      fingerprints=options.fingerprints or options.against is not None)
    if options.against is not None:
        from gradtui.record.against import Reference

        session.against = Reference(options.against)
    for listener in listeners:
        session.add_listener(listener)
    for spec in options.break_on:
        session.submit(f"break {spec}")
    if options.break_on:
        session.run_on()
    return session
