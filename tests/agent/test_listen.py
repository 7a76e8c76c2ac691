"""gradtui.listen() in a process gradtui did not launch: a plain script, and a Jupyter kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.processes import PROCESS_TIMEOUT

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "agent")


def _wait_entry(runtime, timeout: float = PROCESS_TIMEOUT) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list(runtime.iterdir())
        if files:
            try:
                return json.loads(files[0].read_text())
            except ValueError:
                pass  # being written
        time.sleep(0.05)
    raise AssertionError("no agent wrote its runtime file")


def _attach(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "gradtui", "attach", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=PROCESS_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def test_a_plain_script_calling_listen_can_be_attached_to_and_stepped(tmp_path):
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(tmp_path)}
    script = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "listens.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _wait_entry(tmp_path)
        done = _attach(env, "--headless", "-c", "step", "-c", "print", "-c", "continue")
        assert done.returncode == 0, done.stderr
        assert "paused before #1 MulBackward0" in done.stdout and "values [12]" in done.stdout
        out, _ = script.communicate(timeout=PROCESS_TIMEOUT)
        assert script.returncode == 0
        assert [line for line in out.splitlines() if line.startswith("step")] == [
            f"step {i} grad 36.0" for i in range(3)
        ]  # gradients as a plain run gives them
    finally:
        if script.poll() is None:
            script.kill()
        script.wait(10)


def test_a_jupyter_kernel_cell_pauses_is_stepped_and_the_kernel_survives_a_quit(tmp_path):
    import jupyter_client

    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(tmp_path)}
    manager = jupyter_client.KernelManager(kernel_name="python3")
    manager.kernel_spec.argv[0] = sys.executable  # this venv's python, whatever the spec says
    manager.start_kernel(env=env)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=PROCESS_TIMEOUT)

        def run(code: str, timeout: float = PROCESS_TIMEOUT) -> tuple[str, dict]:
            msg_id = client.execute(code)
            out = []
            while True:
                msg = client.get_iopub_msg(timeout=timeout)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
            return "".join(out), reply_to(msg_id, timeout)

        def reply_to(msg_id: str, timeout: float = PROCESS_TIMEOUT) -> dict:
            while True:  # skip replies to earlier requests (kernel_info from wait_for_ready)
                reply = client.get_shell_msg(timeout=timeout)
                if reply["parent_header"].get("msg_id") == msg_id:
                    return reply["content"]

        _, reply = run("import torch, gradtui\nh = gradtui.listen()")
        assert reply["status"] == "ok", reply
        cell = "x = torch.tensor([2.0], requires_grad=True)\n((x * 3) ** 2).backward()\nprint('grad', x.grad.item())"
        msg_id = client.execute(cell)  # pauses at its first node, waiting for a client
        done = _attach(env, "--headless", "-c", "step", "-c", "print", "-c", "continue")
        assert done.returncode == 0, done.stderr
        assert "values [12]" in done.stdout
        assert reply_to(msg_id)["status"] == "ok"
        out, reply = run(cell.replace("2.0", "5.0"))  # runs on (continue): no breakpoint, unhooked
        assert reply["status"] == "ok" and "grad 90.0" in out
        _, reply = run("from gradtui.protocol.commands import parse\nh.session.submit(parse('break MulBackward0'))\n")
        # pauses at the breakpoint; stop_on_error=False: the error it ends in must not make ipykernel
        # abort the next request (its abort window raced the next cell on a slow host: 'aborted')
        msg_id = client.execute(cell, stop_on_error=False)
        done = _attach(env, "--headless", "-c", "quit")
        assert done.returncode in (0, 130), done.stderr
        reply = reply_to(msg_id)
        assert reply["status"] == "error" and reply["ename"] == "GradtuiQuit"
        out, reply = run(cell)  # the kernel lives on, and gradtui no longer stops it
        assert reply["status"] == "ok" and "grad 36.0" in out
        _, reply = run("h.close()")
        assert reply["status"] == "ok" and not list(tmp_path.iterdir())
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
