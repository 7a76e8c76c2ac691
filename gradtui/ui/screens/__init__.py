"""Screens of the gradtui UI."""
