"""Widgets of the gradtui UI."""
