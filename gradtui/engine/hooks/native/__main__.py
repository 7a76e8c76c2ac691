"""`python -m gradtui.engine.hooks.native`: build gradtui's compiled posthooks now and say how it went
(exit status 1 if they could not be built; `--quiet`: say nothing; `--nice`: at low priority, as
a background build runs). Asked for, it builds whatever a failure record says (a background
build is only started once the record's back-off has passed); a background build holds the
builder lock its run handed it for as long as it runs (gradtui.engine.hooks.native.cache)."""

from __future__ import annotations

import os
import sys

from gradtui.engine.hooks.native import build, library_path


def main(argv: list[str]) -> int:
    """Build (again, even if built), load, and report."""
    quiet = "--quiet" in argv
    if "--nice" in argv and hasattr(os, "nice"):
        os.nice(10)
    if not quiet:
        print(f"gradtui: building the compiled posthooks into {library_path()} ...", flush=True)
    native = build()
    if not quiet:
        print("gradtui: built and loaded" if native.module is not None else f"gradtui: not built: {native.reason}")
    return 0 if native.module is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
