"""The process's own life: running the user's script as `python script.py` would, ending it as python would
(exit statuses, signals), deferring a signal that lands while gradtui writes, and the run's quit flag.

May import: torch, gradtui.protocol and gradtui.engine's other parts; never Textual.
"""
