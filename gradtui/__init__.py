"""gradtui: a terminal debugger for PyTorch backward passes."""

__version__ = "0.1.0"
