"""Each distribution installs on its own: `pip install ./core` alone imports, and using a tensor explains that no
device plugin is installed and how to get one. Runs pip into a fresh virtual environment (about 20 s)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCRIPT = """
import lazy
from lazy import Tensor
from lazy.device import DeviceError
try:
    Tensor([1.0, 2.0]) + 1
except DeviceError as e:
    print("ERROR:", e)
else:
    raise SystemExit("using a tensor with no device plugin should raise DeviceError")
"""


def test_core_alone_imports_and_explains(tmp_path: pathlib.Path) -> None:
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT / "core")], check=True)
    out = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "pip install lazy-cpu" in out.stdout, out.stdout
    listing = subprocess.run([str(python), "-m", "lazy", "devices"], capture_output=True, text=True, cwd=tmp_path)
    assert listing.returncode == 0 and "PYTHON" in listing.stdout, listing.stdout + listing.stderr
