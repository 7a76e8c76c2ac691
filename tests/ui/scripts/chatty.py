"""Prints 3,000 lines as fast as it can, and never calls backward."""

for i in range(3000):
    print(f"line {i}")
