"""`gradtui diff` says only what it compared (subprocess runs of `gradtui --headless --record`
then `gradtui diff`): recordings without fingerprints compare what both hold and say the forward
was not compared; a fingerprinted and a plain recording of one run agree; the same program under
another file name (lines moved) is matched file to file and line to line; `diff` leaves the
folder it reads from as it was; saved arguments read as the script gave them; the module table
aligns for long names.

tests/fixtures/diff_model.py (its argument picks a variant) and diff_embedding.py are recorded
once for the module.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from tests.helpers import script
from tests.processes import gradtui, record_with_fingerprints

pytestmark = pytest.mark.timeout(300)

MODEL = script("diff_model.py")
GELU_LINE = next(i for i, line in enumerate(open(MODEL), 1) if "approximate=approximate" in line)


def _plain(path: str, *args: str) -> str:
    """`diff_model.py ARGS` recorded with a plain `--record` (the default: no fingerprints)."""
    run = gradtui("--headless", "-c", "continue", "--record", path, MODEL, *args)
    assert run.returncode == 0, run.stderr
    return path


def _moved_copies(folder) -> tuple[str, str]:
    """diff_model.py copied as model.py, and as model_changed.py with a line inserted near the
    top and its gelu made approximate='tanh' in the source itself."""
    text = open(MODEL).read()
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    a, b = folder / "a" / "model.py", folder / "b" / "model_changed.py"
    a.write_text(text)
    changed = text.replace("import torch\n", "import torch\n\n# a line that moves every line below it\n", 1)
    line = 'approximate = "tanh" if VARIANT == "tanh" else "none"'
    assert line in changed
    b.write_text(changed.replace(line, 'approximate = "tanh"'))
    return str(a), str(b)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("truth")
    out = {
        "plain_ref": _plain(str(folder / "plain_ref.db")),
        "plain_tanh": _plain(str(folder / "plain_tanh.db"), "tanh"),
        "prints_ref": record_with_fingerprints(str(folder / "prints_ref.db"), MODEL),
    }
    a, b = _moved_copies(folder)
    out["moved_a"] = record_with_fingerprints(str(folder / "moved_a.db"), a)
    out["moved_b"] = record_with_fingerprints(str(folder / "moved_b.db"), b)
    out["embed"] = record_with_fingerprints(str(folder / "embed.db"), script("diff_embedding.py"))
    out["embed_pad"] = record_with_fingerprints(str(folder / "embed_pad.db"), script("diff_embedding.py"), "pad")
    return out


def _losses(path: str, index: int) -> list[float]:
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return json.loads(db.execute("SELECT losses FROM passes WHERE idx = ?", (index,)).fetchone()[0])
    finally:
        db.close()


def test_plain_recordings_differing_in_one_op_print_why_and_never_say_the_forward_agrees(made):
    """No fingerprints on either side: status 1 with the loss difference printed (both values),
    a note naming the sides without fingerprints, the gradients compared by what both hold (the
    module table is not zeros), and nothing said to agree about the forward."""
    run = gradtui("diff", made["plain_ref"], made["plain_tanh"])
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "forward agrees" not in out and "no pass differs" not in out, out
    assert "no fingerprints in A and B" in out and "forward not compared" in out, out
    first = json.loads(gradtui("diff", made["plain_ref"], made["plain_tanh"], "--json").stdout)["first_loss_difference"]
    assert first is not None
    la, lb = _losses(made["plain_ref"], first), _losses(made["plain_tanh"], first)
    assert la != lb
    assert f"losses first differ in pass {first}: A {la[0]:.6g}, B {lb[0]:.6g}" in out, out
    # the gradients both files hold differ below the gelu: the table names them, not zeros
    found = json.loads(gradtui("diff", made["plain_ref"], made["plain_tanh"], "--json").stdout)
    assert found["fingerprints"] == [False, False]
    p = found["pass"]
    assert p["forward_compared"] is False and p["forward"] is None
    assert p["gradient"] is not None and p["gradient"]["relative"] > 1e-6
    assert all(row["forward"] is None for row in p["modules"])
    assert {row["module"] for row in p["modules"] if row["gradient"] and row["gradient"] > 1e-6} >= {"fc1", "fc2"}
    assert p["flow"] and p["flow_differs"]


def test_a_plain_and_a_fingerprinted_recording_of_one_run_agree(made):
    run = gradtui("diff", made["prints_ref"], made["plain_ref"])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no fingerprints in B" in run.stdout and "first forward difference" not in run.stdout
    assert "inf" not in run.stdout and "no pass differs" in run.stdout, run.stdout
    found = json.loads(gradtui("diff", made["plain_ref"], made["prints_ref"], "--json").stdout)
    assert found["fingerprints"] == [False, True] and not found["differs"]


def test_the_same_program_under_another_name_with_lines_moved_names_the_changed_op(made):
    """model.py vs model_changed.py (a line inserted above, the gelu's approximate changed in the
    source): every node is matched, and the changed gelu is named at both files' lines."""
    run = gradtui("diff", made["moved_a"], made["moved_b"], "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    found = json.loads(run.stdout)
    p = found["pass"]
    assert p["only_a"] == [] and p["only_b"] == [] and p["matched"] == 16, p
    assert p["forward"]["node"]["op"] == "GeluBackward0"
    assert p["forward"]["node"]["source"] == f"model.py:{GELU_LINE}"
    assert p["forward"]["source_b"] == f"model_changed.py:{GELU_LINE + 2}"
    assert p["forward"]["arguments"] == "approximate='none' vs approximate='tanh'"
    assert [(f["a"], f["b"]) for f in found["files"]] == [("model.py", "model_changed.py")]
    text = gradtui("diff", made["moved_a"], made["moved_b"]).stdout
    assert "file matched: model.py in A is model_changed.py in B (the scripts)" in text, text
    assert f"GeluBackward0 at model.py:{GELU_LINE}" in text and f"at model_changed.py:{GELU_LINE + 2})" in text


def _listing(folder: str) -> dict[str, tuple[int, int]]:
    return {
        name: (os.stat(os.path.join(folder, name)).st_size, os.stat(os.path.join(folder, name)).st_mtime_ns)
        for name in os.listdir(folder)
    }


def test_diff_leaves_the_folder_it_reads_as_it_was(made):
    folder = os.path.dirname(made["plain_ref"])
    before = _listing(folder)
    for pair in ((made["plain_ref"], made["plain_tanh"]), (made["prints_ref"], made["plain_ref"])):
        assert gradtui("diff", *pair).returncode in (0, 1)
        assert gradtui("diff", *pair, "--json").returncode in (0, 1)
    assert _listing(folder) == before


def test_saved_arguments_read_as_the_script_gave_them(made):
    """An embedding's unset padding_idx (saved as int64 -1, read back by torch as 2**64 - 1)
    reads `padding_idx=-1`, beside the variant's `padding_idx=0`."""
    run = gradtui("diff", made["embed"], made["embed_pad"])
    assert run.returncode == 1, run.stdout + run.stderr
    assert "18446744073709551615" not in run.stdout
    assert "arguments: padding_idx=-1, " in run.stdout and " vs padding_idx=0, " in run.stdout, run.stdout


def test_module_table_columns_align_under_a_long_module_name(made):
    """The module table's columns line up under a 38-character module name."""
    run = gradtui("diff", made["embed"], made["embed_pad"])
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["module"])
    table = lines[start:]
    assert any("token_embedding_table_with_a_long_name" in line for line in table)
    assert len(table) == 3 and len({len(line) for line in table}) == 1, table
    header = table[0]
    for row in table[1:]:  # each number ends where its column's heading does
        for heading in ("forward", "gradient"):
            end = header.index(heading) + len(heading)
            assert row[end - 1] != " " and (end == len(row) or row[end] == " "), (heading, table)


def test_an_older_recordings_unsigned_arguments_compare_as_signed():
    """Recordings made before gradtui turned torch's unsigned reading back hold
    `padding_idx=18446744073709551615`: read as -1, they agree with a newer recording's text."""
    from gradtui.record.compare import signed_text

    assert signed_text("padding_idx=18446744073709551615, sparse=False") == "padding_idx=-1, sparse=False"
    assert signed_text("dims=(18446744073709551614, 0)") == "dims=(-2, 0)"
    assert signed_text("size=12345678901234567890123") == "size=12345678901234567890123"
    assert signed_text("scale=10000000000000000000.5") == "scale=10000000000000000000.5"
