"""Prints what a script should see: its argv, __name__, a sibling import, stdin, interleaved streams."""

import sys

import sibling

print("argv", sys.argv[1:])
print("name", __name__)
print("sibling", sibling.VALUE)
sys.stderr.write("to stderr\n")
try:
    input()
except EOFError:
    print("stdin is empty")
print("done")
