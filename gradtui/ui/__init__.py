"""The Textual UI of gradtui: app, screens, widgets (see app.py)."""
