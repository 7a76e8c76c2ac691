"""Crashes the interpreter with a segmentation fault, as a bug in a C extension would."""

import ctypes

print("about to crash", flush=True)
ctypes.string_at(0)
