"""Scripts shipped with gradtui; `demo.py` is what `gradtui` runs without a script."""
