"""torch_load reads a PyTorch checkpoint without importing torch (the checkpoint in tests/data was written by
torch 2.13 `torch.save` of a state dict; the expected values beside it by numpy)."""

import os
import pathlib
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from lazy import dtypes
from lazy.nn.state import torch_load

DATA = pathlib.Path(__file__).parent / "data"


def test_every_tensor_matches_and_torch_is_never_imported():
    script = (
        "import sys, numpy as np; from lazy.nn.state import torch_load\n"
        f"sd = torch_load({str(DATA / 'tiny_checkpoint.pt')!r}, device='PYTHON')\n"
        f"want = np.load({str(DATA / 'tiny_checkpoint_expected.npz')!r})\n"
        "for k in want.files:\n"
        "    got = sd[k].numpy()\n"
        "    assert got.shape == want[k].shape, (k, got.shape)\n"
        "    np.testing.assert_array_equal(got, want[k].astype(got.dtype))\n"
        "assert 'torch' not in sys.modules\n"
        "print(sorted(sd))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "linear.weight" in out.stdout and "view" in out.stdout


def test_dtypes_and_a_non_contiguous_view():
    sd = torch_load(DATA / "tiny_checkpoint.pt", device="PYTHON")
    assert sd["emb"].dtype == dtypes.float16 and sd["bf"].dtype == dtypes.bfloat16 and sd["mask"].dtype == dtypes.bool
    np.testing.assert_array_equal(sd["view"].numpy(), np.arange(12, dtype=np.int32).reshape(3, 4).T)


def test_refuses_code_and_non_checkpoints(tmp_path):
    bad = tmp_path / "evil.pt"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps(os.system))  # a reference to a function it must never load
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        torch_load(bad)
    not_zip = tmp_path / "old.pt"
    not_zip.write_bytes(b"\x80\x02legacy")
    with pytest.raises(ValueError, match="zip-format"):
        torch_load(not_zip)
