"""gradtui: a terminal debugger for PyTorch backward passes.

`gradtui train.py` runs a script under the debugger; in code, `gradtui.listen()` debugs the
calling process (a notebook, a Trainer, a torchrun rank) for `gradtui attach` to connect to.
"""

__version__ = "0.1.0"


def listen(
    address=None, *, break_on=None, record=None, record_every=None, flight=None, fingerprints=False, against=None
):
    """Debug this process from now on for `gradtui attach` clients (see gradtui.agent.listen)."""
    from gradtui.agent.listen import listen as _listen

    return _listen(
        address,
        break_on=break_on,
        record=record,
        record_every=record_every,
        flight=flight,
        fingerprints=fingerprints,
        against=against,
    )
