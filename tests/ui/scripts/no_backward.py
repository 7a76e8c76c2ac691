"""A script that never calls backward, and exits with status 3."""

import sys

print("no gradients here")
sys.exit(3)
