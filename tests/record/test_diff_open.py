"""`gradtui diff` on a damaged recording (a table missing): one line naming it, exit 2 (bad
input), never a traceback nor 1, which means "they differ"."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from gradtui.cli import diff as diff_cli
from tests.helpers import script
from tests.processes import record_with_fingerprints


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("diffopen")
    return record_with_fingerprints(str(folder / "run.db"), script("chain.py"))


@pytest.mark.parametrize("table", ["nodes", "grads", "passes", "run"])
def test_diff_of_a_recording_missing_a_table_says_so_in_one_line_and_exits_2(recording, table, tmp_path, capsys):
    damaged = str(tmp_path / f"no_{table}.db")
    shutil.copy(recording, damaged)
    db = sqlite3.connect(damaged)
    db.execute(f"DROP TABLE {table}")
    db.commit()
    db.close()
    for a, b in ((recording, damaged), (damaged, recording)):
        assert diff_cli.main([a, b]) == diff_cli.BAD_INPUT
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, err
        assert err.startswith(f"gradtui diff: {damaged}: damaged") and f"{table} table" in err, err
