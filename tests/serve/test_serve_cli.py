"""`gradtui serve`'s command line in this process: bad arguments, and what it prints about where
it serves (loopback and the SSH tunnel, or a warning for any other host)."""

from __future__ import annotations

import socket

import pytest

from gradtui.cli import serve as cli
from gradtui.serve.web import ServeOptions


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--port", "70000"], "out of range"),
        (["--token", " "], "--token is empty"),
    ],
)
def test_bad_arguments_are_refused(argv, words, capsys):
    assert cli.main(argv) == 2
    assert words in capsys.readouterr().err


def test_on_loopback_it_prints_the_url_and_the_ssh_tunnel(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(tmp_path))
    cli._say_where(ServeOptions("127.0.0.1", 8000, "tok", None), 8123)
    out, err = capsys.readouterr()
    assert "http://127.0.0.1:8123/?token=tok" in out
    assert f"ssh -N -L 8123:127.0.0.1:8123 {socket.gethostname()}" in out
    assert "none is running yet" in out and err == ""


def test_another_host_is_served_with_a_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(tmp_path))
    cli._say_where(ServeOptions("0.0.0.0", 8000, "tok", "127.0.0.1:5678"), 8000)
    out, err = capsys.readouterr()
    assert "warning: serving on 0.0.0.0, not loopback" in err
    assert f"http://{socket.gethostname()}:8000/?token=tok" in out and "the agent at 127.0.0.1:5678" in out


def test_gradtui_serve_is_dispatched_by_the_gradtui_command(capsys):
    from gradtui.cli.main import main

    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    assert "gradtui serve" in capsys.readouterr().out
