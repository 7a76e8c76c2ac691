"""Output with terminal control codes: a `\r` progress line, ANSI colours, a bell."""

import sys

for i in range(3):
    sys.stderr.write(f"\rstep {i} \x1b[31mred\x1b[0m\x07")
    sys.stderr.flush()
print("\n\x1b[1mbold\x1b[0m ✓ 日本")
