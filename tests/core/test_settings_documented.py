"""Every `LAZY_` setting is documented in the README's settings table, and the table names no setting that does not
exist: a user reads the table to know what they can set. A value a setting cannot take is refused where it is read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lazy.helpers import Context, Setting  # (every setting is declared there)

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_lists_every_setting():
    table = set(re.findall(r"^\| `LAZY_(\w+)` \|", README.read_text(), re.MULTILINE))
    declared = set(Setting.registry)
    assert declared - table == set(), f"settings missing from README.md's table: {sorted(declared - table)}"
    assert table - declared == set(), f"README.md's table lists settings that do not exist: {sorted(table - declared)}"


def _import_with(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import lazy"], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("name", ["BEAM", "BEAM_BUDGET", "THREADS"])
def test_a_count_below_its_minimum_is_refused_with_the_fix(name):
    """LAZY_BEAM=-1 once meant no search at all, silently; a negative count is refused where it is read, saying what
    the setting is, as a non-integer is."""
    proc = _import_with({f"LAZY_{name}": "-1"})
    assert proc.returncode != 0 and f"LAZY_{name}=-1 is below 0: set it to 0 or more" in proc.stderr, proc.stderr
    assert _import_with({f"LAZY_{name}": "0"}).returncode == 0
    with pytest.raises(ValueError, match=f"LAZY_{name}=-3 is below 0"):
        Context(**{name: -3})
    before = Setting.registry[name].value
    with Context(**{name: 2}):
        assert Setting.registry[name].value == 2
    assert Setting.registry[name].value == before


def test_a_setting_that_is_not_a_number_is_refused():
    proc = _import_with({"LAZY_BEAM": "abc"})
    assert proc.returncode != 0 and "LAZY_BEAM='abc' is not an integer" in proc.stderr, proc.stderr
