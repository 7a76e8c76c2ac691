"""Shared with the tests in the same process: scripts put objects here, tests read them back."""

items: dict = {}
