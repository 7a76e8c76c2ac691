"""The command line, in subprocesses: `python -m gradtui --headless ...` (and the `gradtui`
console script when it is installed) on the example scripts, the report's JSON shape, errors,
`-x FILE`, `--help`, the bundled demo, and that headless runs never import Textual."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO, example, script
from tests.processes import PROCESS_TIMEOUT, gradtui

pytestmark = pytest.mark.timeout(120)

LAUNCHERS = [[sys.executable, "-m", "gradtui"]]
if shutil.which("gradtui"):
    LAUNCHERS.append([shutil.which("gradtui")])

NODE_KEYS = {"id", "name", "labels", "param", "source", "module", "order", "next", "grad_outputs", "grad_inputs"}
STATS_KEYS = {"shape", "dtype", "device", "norm", "min", "max", "mean", "nonfinite"}


def strict_json(path) -> dict:
    def refuse(name: str):
        raise AssertionError(f"not strict JSON: {name}")

    with open(path, encoding="utf-8") as handle:
        return json.load(handle, parse_constant=refuse)


def check_stats(stats: dict) -> None:
    assert STATS_KEYS <= set(stats) <= STATS_KEYS | {"values"}
    numel = 1
    for dim in stats["shape"]:
        numel *= dim
    if numel <= 64:
        assert len(stats["values"]) == numel
    else:
        assert "values" not in stats


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda argv: "python-m" if len(argv) == 3 else "console-script")
def test_chain_with_steps_prints_12_and_36(launcher):
    done = gradtui("--headless", "-c", "step", "-c", "step", "-c", "continue", example("chain.py"), launcher=launcher)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "paused before #1 MulBackward0 (y)" in out
    assert "in[0] [1] float32 cpu  norm 12  min 12  max 12  mean 12  values [12]" in out
    assert "paused before #2 AccumulateGrad (x)" in out
    assert "in[0] [1] float32 cpu  norm 36  min 36  max 36  mean 36  values [36]" in out
    assert "x.grad = 36.0" in out
    assert out.rstrip().endswith("script exited with status 0")


def test_edit_from_the_command_line():
    done = gradtui("--headless", "-c", "step", "-c", "step", "-c", "scale 0.5", "-c", "continue", example("chain.py"))
    assert done.returncode == 0
    assert "x.grad = 18.0" in done.stdout


def test_report_shape(tmp_path):
    report_path = tmp_path / "report.json"
    done = gradtui(
        "--headless",
        "-c",
        "break 0.weight",
        "-c",
        "continue",
        "-c",
        "scale 2",
        "-c",
        "continue",
        "--report",
        str(report_path),
        example("mlp.py"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = strict_json(report_path)
    assert {"script", "exit_status", "passes", "breakpoint_hits", "edits"} <= set(report)
    assert report["script"] == example("mlp.py") and report["exit_status"] == 0
    assert [p["index"] for p in report["passes"]] == [0, 1, 2]
    big = small = 0
    for p in report["passes"]:
        assert {"index", "call", "nodes"} <= set(p) and p["call"] == "backward"
        ids = [n["id"] for n in p["nodes"]]
        assert ids == list(range(len(ids)))
        orders = sorted(n["order"] for n in p["nodes"])
        assert orders == list(range(1, len(ids) + 1))  # every node ran, once
        for node in p["nodes"]:
            assert NODE_KEYS <= set(node)
            assert isinstance(node["name"], str) and isinstance(node["labels"], list)
            assert all(j is None or 0 <= j < len(ids) for j in node["next"])
            assert len(node["next"]) == len(node["grad_inputs"])  # one per next_functions slot
            for stats in node["grad_outputs"] + node["grad_inputs"]:
                if stats is not None:
                    check_stats(stats)
                    big += "values" not in stats
                    small += "values" in stats
    assert big and small  # both forms occur: the MLP has 64x16 activations and scalars
    loss = report["passes"][0]["nodes"][0]
    assert loss["name"] == "MseLossBackward0" and loss["labels"] == ["loss"]
    assert loss["source"].startswith("mlp.py:")
    params = {n["param"] for n in report["passes"][0]["nodes"] if n["param"]}
    assert params == {"0.weight", "0.bias", "2.weight", "2.bias"}
    (hit,) = report["breakpoint_hits"][:1]
    assert hit["spec"] == "0.weight" and hit["pass"] == 0
    (edit,) = report["edits"]
    assert edit["command"] == "scale 2" and edit["node"] == hit["node"]
    assert edit["after"][0]["norm"] == pytest.approx(2 * edit["before"][0]["norm"], rel=1e-6)


def test_report_of_nan_is_strict_json(tmp_path):
    report_path = tmp_path / "report.json"
    done = gradtui("--headless", "-c", "break nan", "-c", "continue", "--report", str(report_path), example("nan.py"))
    assert done.returncode == 0
    report = strict_json(report_path)
    (sqrt,) = [n for n in report["passes"][0]["nodes"] if n["name"] == "SqrtBackward0"]
    assert sqrt["grad_inputs"][0]["values"][1] == "nan"
    assert sqrt["grad_inputs"][0]["nonfinite"] == 1
    assert report["breakpoint_hits"] == [{"breakpoint": 1, "spec": "nan", "pass": 0, "node": sqrt["id"]}]
    assert "paused after" in done.stdout and "SqrtBackward0" in done.stdout


def test_missing_script():
    done = gradtui("--headless", "no/such/script.py")
    assert done.returncode == 2
    assert "gradtui: no such script: no/such/script.py" in done.stderr
    assert done.stdout == ""


def test_syntax_error_in_the_script(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nloss = (\n", encoding="utf-8")
    report_path = tmp_path / "report.json"
    done = gradtui("--headless", "--report", str(report_path), str(bad))
    assert done.returncode == 1
    assert f'File "{bad}", line 2' in done.stderr and "SyntaxError" in done.stderr
    report = strict_json(report_path)
    assert report["exit_status"] == 1 and report["passes"] == [] and "SyntaxError" in report["error"]


def test_exception_in_the_script_still_writes_the_report(tmp_path):
    report_path = tmp_path / "report.json"
    done = gradtui("--headless", "-c", "continue", "--report", str(report_path), script("raises.py"))
    assert done.returncode == 1
    assert "ValueError: boom after one pass" in done.stderr
    report = strict_json(report_path)
    assert report["exit_status"] == 1 and len(report["passes"]) == 1


def test_exit_status_is_the_scripts():
    assert gradtui("--headless", script("exit3.py")).returncode == 3


def test_command_file(tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("# step to x's accumulator\nstep\n\nstep\n", encoding="utf-8")
    done = gradtui("--headless", "-x", str(commands), "-c", "scale 0.5", "-c", "continue", example("chain.py"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("(gradtui) step") < out.index("(gradtui) scale 0.5")  # -x runs before -c
    assert "# step" not in out
    assert "x.grad = 18.0" in out


def test_missing_command_file(tmp_path):
    done = gradtui("--headless", "-x", str(tmp_path / "nope.txt"), example("chain.py"))
    assert done.returncode == 2
    assert "gradtui: cannot read -x" in done.stderr


def test_command_file_that_is_not_text(tmp_path, capsys):
    from gradtui.cli.main import main

    commands = tmp_path / "commands.bin"
    commands.write_bytes(b"step\n\xff\xfe\n")
    assert main(["--headless", "-x", str(commands), example("chain.py")]) == 2
    assert "gradtui: cannot read -x" in capsys.readouterr().err


def test_report_path_is_checked_before_the_script_runs(tmp_path, capsys):
    from gradtui.cli.main import main

    (tmp_path / "file").write_text("", encoding="utf-8")
    for bad, why in [
        (tmp_path / "file" / "r.json", "cannot create the folder"),
        (tmp_path, "it is a directory"),
        ("", "empty path"),
    ]:
        assert main(["--headless", "--report", str(bad), example("chain.py")]) == 2
        err = capsys.readouterr().err
        assert "gradtui: cannot write --report" in err and why in err and len(err.splitlines()) == 1
        assert "step" not in capsys.readouterr().out  # refused before the script ran


def test_a_missing_report_folder_is_created(tmp_path, capsys):
    from gradtui.cli.main import main

    path = tmp_path / "new" / "deeper" / "r.json"
    assert main(["--headless", "--report", str(path), example("chain.py")]) == 0, capsys.readouterr()
    assert strict_json(path)["exit_status"] == 0


def test_relative_report_path_survives_the_script_changing_directory(tmp_path, monkeypatch, capsys):
    from gradtui.cli.main import main

    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "moves.py"
    path.write_text(
        "import os, torch\nos.chdir('elsewhere')\nx = torch.ones(1, requires_grad=True)\n(x * 2).sum().backward()\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)  # restored after the test, whatever the script does
    assert main(["--headless", "--report", "r.json", str(path)]) == 0, capsys.readouterr()
    assert strict_json(tmp_path / "r.json")["exit_status"] == 0
    assert not (tmp_path / "elsewhere" / "r.json").exists()


def test_arguments_after_the_script_go_to_the_script():
    done = gradtui("--headless", script("io_argv.py"), "-c", "step", "--report", "x")
    assert done.returncode == 0, done.stderr
    assert "argv ['-c', 'step', '--report', 'x']" in done.stdout
    assert "to stderr" in done.stderr and "to stderr" not in done.stdout  # each stream to its own


def test_help_mentions_the_commands():
    done = gradtui("--help")
    assert done.returncode == 0
    for word in (
        "--headless",
        "-c CMD",
        "-x FILE",
        "--report",
        "step (s)",
        "continue (c)",
        "finish (f)",
        "break SPEC",
        "scale F",
        "zero",
        "clip N",
        "set EXPR",
        "print [EXPR]",
        "why NAME",
        "quit (q)",
        "norm>X",
        "pass N",
    ):
        assert word in done.stdout, word


def test_version_is_the_installed_packages(capsys):
    from importlib.metadata import version

    from gradtui.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gradtui {version('gradtui')}\n"  # on stdout, as argparse's action


TWO_PASSES = """\
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
for _ in range(2):
    model(torch.randn(4, 3)).pow(2).mean().backward()
"""


@pytest.mark.parametrize(
    "commands, flows", [(["break nan", "continue"], False), (["finish", "flow", "continue"], True)]
)
def test_a_headless_pass_computes_its_flow_only_for_a_flow_command(tmp_path, monkeypatch, capsys, commands, flows):
    """The headless driver prints no flow: a hooked pass computes one (two norms of every parameter)
    only when a `flow` command may ask for it."""
    from gradtui.cli.main import main
    from gradtui.engine.stats.passrecord import FlowRecorder

    made = []
    recorded_flow = FlowRecorder.recorded_flow
    monkeypatch.setattr(FlowRecorder, "recorded_flow", lambda self, *a: made.append(1) or recorded_flow(self, *a))
    path = tmp_path / "two_passes.py"
    path.write_text(TWO_PASSES, encoding="utf-8")
    assert main(["--headless", *[arg for c in commands for arg in ("-c", c)], str(path)]) == 0
    out = capsys.readouterr().out
    assert "pass 1 done · " in out
    assert bool(made) is flows
    assert ("gradient flow after pass 0:" in out) is flows


def test_no_script_runs_the_demo(tmp_path):
    report_path = tmp_path / "report.json"
    done = gradtui("--headless", "-c", "continue", "--report", str(report_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "step 2 loss" in done.stdout
    report = strict_json(report_path)
    assert report["script"].endswith(os.path.join("gradtui", "examples", "demo.py"))
    assert len(report["passes"]) == 3


CHECK_NO_UI = """
import sys
import gradtui.engine.session, gradtui.engine.process.runner, gradtui.protocol.report, gradtui.cli.main, gradtui.clients.headless
def loaded():
    return sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'rich'})
assert not loaded(), loaded()
from gradtui.cli import main as cli
status = cli.main(['--headless', '-c', 'step', '-c', 'continue', sys.argv[1]])
assert status == 0, status
assert not loaded(), loaded()
print('no ui loaded')
"""


def test_headless_never_imports_textual():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHECK_NO_UI, example("chain.py")],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "x.grad = 36.0" in done.stdout
    assert done.stdout.rstrip().endswith("no ui loaded")


def test_a_torch_compiled_model(tmp_path):
    """torch.compile traces gradtui's provenance mode and module hooks, and AOTAutograd calls
    torch.autograd.grad on fake tensors while compiling: that pass failed (.item() of a fake
    tensor), broke the compiled graph and filled stderr with Dynamo warnings. (--report: every
    pass is hooked.)"""
    done = gradtui("--headless", "-c", "continue", "--report", str(tmp_path / "r.json"), script("compiled.py"))
    assert done.returncode == 0, done.stderr
    assert "grad -0.07184" in done.stdout
    started = [
        line.split(" · loss ")[0] + " · " + line.split(" · ")[-1]
        for line in done.stdout.splitlines()
        if line.startswith("pass ") and " at " in line
    ]
    assert started == [f"pass {i} · loss.backward() at compiled.py:11 · 7 nodes" for i in (0, 1)]
    assert "failed" not in done.stdout
    assert "Dynamo does not know how to trace" not in done.stderr and "graph break" not in done.stderr


def test_record_all_hooks_every_pass_and_the_default_does_not():
    fast = gradtui("--headless", "-c", "continue", script("train_loop.py"), "4")
    every = gradtui("--headless", "--record-all", "-c", "continue", script("train_loop.py"), "4")
    assert fast.returncode == every.returncode == 0, fast.stderr + every.stderr
    assert "passes 1-3 ran unhooked at plain speed: nothing could stop in them" in fast.stdout
    assert "unhooked" not in every.stdout
    assert [line.split(" · ")[0] for line in every.stdout.splitlines() if line.endswith("nodes ran")] == [
        f"pass {i} done" for i in range(4)
    ]
    assert fast.stdout.splitlines()[-2] == every.stdout.splitlines()[-2]  # the same final loss


@pytest.mark.parametrize("command", [["attach", "127.0.0.1:1", "--token", "t", "--headless"], ["replay", "DB"]])
def test_every_client_command_says_why_it_cannot_read_its_command_file(tmp_path, capsys, command):
    """attach and replay read -x as gradtui does: a bad file is one line and status 2, no traceback."""
    from gradtui.cli.main import main
    from gradtui.record.store import Recorder

    if command[-1] == "DB":
        command = ["replay", str(tmp_path / "run.db")]
        Recorder(command[1], argv=[]).close()
    assert main([*command, "-x", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err
    assert f"gradtui {command[0]}: cannot read -x {tmp_path / 'nope.txt'}: No such file or directory" in err
    assert "Traceback" not in err


CHECK_NO_TORCH = """
import sys
from gradtui.cli import main as cli
for argv in (['--headless', 'no/such/script.py'], ['attach', '--headless', '-x', 'no/such/file']):
    assert cli.main(argv) == 2
assert 'torch' not in sys.modules, 'bad input loaded torch'
print('no torch loaded')
"""


def test_bad_input_is_answered_without_loading_torch():
    """A typo on the command line is answered at once: torch (seconds to import) is not loaded."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHECK_NO_TORCH],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no torch loaded" in done.stdout
