"""Every `LAZY_` setting is documented in the README's settings table, and the table names no setting that does not
exist: a user reads the table to know what they can set."""

from __future__ import annotations

import re
from pathlib import Path

from lazy.helpers import Setting  # (every setting is declared there)

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_lists_every_setting():
    table = set(re.findall(r"^\| `LAZY_(\w+)` \|", README.read_text(), re.MULTILINE))
    declared = set(Setting.registry)
    assert declared - table == set(), f"settings missing from README.md's table: {sorted(declared - table)}"
    assert table - declared == set(), f"README.md's table lists settings that do not exist: {sorted(table - declared)}"
