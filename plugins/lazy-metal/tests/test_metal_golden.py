"""The MSL of the conformance suite's kernels and of a few real programs' kernels, against the reviewed golden files in
golden/ (no Metal compiler runs off macOS: a change to the MSL shows here as a diff to review). Regenerate them with
`python -m lazy_metal.golden --update` and read the result with `git diff`; never silently."""

from __future__ import annotations

import pathlib

import pytest

from lazy_metal import golden
from lazy_metal.golden import UPDATE_COMMAND, differences, golden_sources, main

GOLDEN = pathlib.Path(__file__).parent / "golden"


def test_msl_matches_the_reviewed_golden_files():
    sources = golden_sources()
    assert any(name.startswith("conf_wmma_") for name in sources) and any(n.startswith("prog_") for n in sources)
    problems = differences(GOLDEN, sources)
    if problems:
        shown = "\n".join(problems[:10]) + (f"\n... and {len(problems) - 10} more" if len(problems) > 10 else "")
        pytest.fail(f"{len(problems)} golden MSL files differ from what MetalRenderer writes now:\n{shown}\n"
                    f"If the new MSL is right, run `{UPDATE_COMMAND}` and review the change with `git diff`.",
                    pytrace=False)  # fmt: skip


def test_a_difference_prints_the_diff_and_how_to_regenerate(tmp_path, capsys, monkeypatch):
    some = {name: src for name, src in golden_sources().items() if name in ("conf_add.metal", "conf_if.metal")}
    monkeypatch.setattr(golden, "golden_sources", lambda: some)  # the command's logic, on two kernels
    assert main(["--update", "--dir", str(tmp_path)]) == 0
    assert main(["--dir", str(tmp_path)]) == 0
    edited = tmp_path / "conf_add.metal"
    edited.write_text(edited.read_text().replace("(val0+val1)", "(val0-val1)"))
    (tmp_path / "conf_gone.metal").write_text("stale\n")
    (tmp_path / "conf_if.metal").unlink()
    capsys.readouterr()
    assert main(["--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "-  data0[gidx0] = (val0-val1);\n+  data0[gidx0] = (val0+val1);" in out  # a unified diff
    assert "conf_if.metal: missing" in out and "conf_gone.metal: no kernel renders it any more" in out
    assert UPDATE_COMMAND in out
    assert main(["--update", "--dir", str(tmp_path)]) == 0 and not (tmp_path / "conf_gone.metal").exists()
    assert main(["--dir", str(tmp_path)]) == 0
