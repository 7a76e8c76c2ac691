"""The documentation says what the code does, and only what a reader can follow.

The usage page's tables of commands and breakpoint specs are made from gradtui's own tables by
an MkDocs hook (docs/hooks/tables.py); its keys are written by hand, and a test fails when a key
of the key table is missing, so a new one cannot land undocumented. And nothing a reader gets (README, CONTRIBUTING, the docs site) may
send them to a file outside the repository or to a tracker's number: it says the reason instead.
(`mkdocs build --strict`, in .ci/run, checks the site's links and navigation.)
"""

from __future__ import annotations

import re

import pytest

from gradtui.protocol.breakpoints import KINDS
from gradtui.protocol.commands import COMMANDS
from gradtui.ui.keys import KEYS, display
from tests.helpers import REPO

pytestmark = pytest.mark.timeout(60)

USAGE = REPO / "docs" / "usage.md"


def _section(text: str, heading: str) -> str:
    """The text of a `## heading` section, up to the next heading of the same level."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _tables():
    """docs/hooks/tables.py, imported from its file (it is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("doc_tables", REPO / "docs" / "hooks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_usage_pages_tables_are_made_from_the_command_table_and_the_breakpoint_kinds():
    usage = USAGE.read_text(encoding="utf-8")
    assert "<!-- commands -->" in _section(usage, "Commands") and "<!-- break-specs -->" in usage
    tables = _tables()
    page = tables.on_page_markdown(usage)
    commands = _section(page, "Commands")
    missing = [c.verb for c in COMMANDS if c.summary and f"`{(c.usage or c.verb).split(' (')[0]}`" not in commands]
    assert missing == [], f"commands missing from the generated table: {missing}"
    assert [k.form for k in KINDS if f"| `{k.form}`" not in page] == []


def test_every_key_of_the_key_table_is_in_the_usage_pages_keys():
    keys = _section(USAGE.read_text(encoding="utf-8"), "Keys")
    missing = [display(key) for key in KEYS if f"`{display(key)}`" not in keys]
    assert missing == [], f"keys missing from docs/usage.md's Keys: {missing}"


def _reader_pages() -> list:
    """Every page a reader gets: README, CONTRIBUTING and the docs site's pages."""
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_no_page_points_at_an_outside_design_file_or_an_issue_number():
    pattern = re.compile(r"DESIGN\.md|\b[Ii]ssue #?[0-9]+")
    found = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()}"
        for page in _reader_pages()
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == [], "\n".join(found)


def _source_files() -> list:
    """Every file of the code, the tests and the benchmarks that git would track (no caches)."""
    return sorted(
        path
        for folder in ("gradtui", "tests", "benchmarks")
        for path in (REPO / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".so")
    )


def test_no_source_points_at_an_outside_design_file_or_an_issue_number():
    """Code, tests and benchmarks say the reason, not a pointer a reader cannot follow. (The pattern
    is written so that it does not match its own source.)"""
    pattern = re.compile(r"DESIGN\.md|\b[Ii]ssue #?[0-9]+")
    files = _source_files()
    assert len(files) > 100 and REPO / "tests" / "test_docs.py" in files
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == [], "\n".join(found)


def test_the_checks_read_real_pages():
    """The pages are there and the sections are found: a renamed heading fails here, not silently."""
    pages = _reader_pages()
    assert len(pages) >= 9 and all(page.is_file() for page in pages)
    assert "<!-- commands -->" in _section(USAGE.read_text(encoding="utf-8"), "Commands")
    assert "`s`" in _section(USAGE.read_text(encoding="utf-8"), "Keys")
