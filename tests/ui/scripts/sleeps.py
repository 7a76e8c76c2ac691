"""Sits in a C call (time.sleep) for a minute: quitting must not wait for it."""

import time

print("sleeping", flush=True)
time.sleep(60)
