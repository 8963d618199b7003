"""torch_load reads a PyTorch checkpoint without importing torch (the checkpoint in tests/data was written by
torch 2.13 `torch.save` of a state dict; the expected values beside it by numpy)."""

import os
import pathlib
import pickle
import pickletools
import re
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


# --- crafted checkpoints: every number in the file is checked before numpy views the storage ------------------------


def plain(value) -> bytes:
    """The pickle opcodes of a plain value (int, str, tuple, bool), to splice into a hand-written pickle."""
    return pickletools.optimize(pickle.dumps(value, protocol=2))[2:-1]  # no PROTO header, no STOP


def tensor_opcodes(storage_type: str, key: str, offset, size, stride) -> bytes:
    """What torch.save pickles for a tensor: _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())."""
    storage = b"(" + plain("storage") + f"ctorch\n{storage_type}\n".encode() + plain(key) + plain("cpu") + plain(0)
    hooks = b"ccollections\nOrderedDict\n)R"
    args = plain(offset) + plain(size) + plain(stride) + plain(False) + hooks
    return b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"tQ" + args + b"tR"


def write_checkpoint(path: pathlib.Path, tensors: dict[str, bytes], storages: dict[str, bytes], **records) -> str:
    """A zip checkpoint laid out as torch.save writes one: <name>/data.pkl, <name>/data/<key>, <name>/byteorder."""
    items = b"".join(plain(name) + opcodes for name, opcodes in tensors.items())
    pkl = b"\x80\x02ccollections\nOrderedDict\n)R(" + items + b"u."
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ckpt/data.pkl", pkl)
        for key, data in storages.items():
            z.writestr(f"ckpt/data/{key}", data)
        for name, data in records.items():
            z.writestr(f"ckpt/{name}", data)
    return str(path)


FLOATS4 = np.arange(4, dtype=np.float32).tobytes()


def test_a_hand_written_checkpoint_loads(tmp_path):
    """The builder below writes what torch.save writes: offsets, strides and shared storages are read right."""
    path = write_checkpoint(
        tmp_path / "ok.pt",
        {
            "w": tensor_opcodes("FloatStorage", "0", 1, (3,), (1,)),
            "t": tensor_opcodes("FloatStorage", "0", 0, (2, 2), (1, 2)),
            "b": tensor_opcodes("FloatStorage", "0", 2, (5,), (0,)),  # an expanded tensor
            "s": tensor_opcodes("FloatStorage", "0", 3, (), ()),
            "e": tensor_opcodes("IntStorage", "missing", 0, (0, 3), (3, 1)),  # empty: reads no storage
        },
        {"0": FLOATS4},
        byteorder="little",
    )
    sd = torch_load(path, device="PYTHON")
    np.testing.assert_array_equal(sd["w"].numpy(), [1, 2, 3])
    np.testing.assert_array_equal(sd["t"].numpy(), [[0, 2], [1, 3]])
    np.testing.assert_array_equal(sd["b"].numpy(), [2] * 5)
    assert sd["s"].shape == () and sd["s"].item() == 3
    assert sd["e"].shape == (0, 3) and sd["e"].dtype == dtypes.int32


def test_a_big_endian_checkpoint_is_byte_swapped(tmp_path):
    data = np.arange(4, dtype=">i4").tobytes()
    path = write_checkpoint(
        tmp_path / "be.pt", {"x": tensor_opcodes("IntStorage", "0", 0, (4,), (1,))}, {"0": data}, byteorder="big"
    )
    np.testing.assert_array_equal(torch_load(path, device="PYTHON")["x"].numpy(), np.arange(4))
    bad = write_checkpoint(tmp_path / "odd.pt", {"x": tensor_opcodes("IntStorage", "0", 0, (4,), (1,))},
                           {"0": data}, byteorder="middle")  # fmt: skip
    with pytest.raises(ValueError, match="byte order 'middle'"):
        torch_load(bad)


# name: (offset, size, stride, storage bytes, what the error says)
FAR_OUTSIDE = {  # numpy would read gigabytes past the storage: a segfault, so these run in a child process
    "a size past the storage": (0, (1 << 22,), (1,), FLOATS4, r"size \(4194304,\).* reach element 4194303, .* 4 elem"),
    "a stride past the storage": (0, (2,), (1 << 30,), FLOATS4, r"stride \(1073741824,\).* holds 4 elements"),
    "an offset past the storage": (1 << 40, (1,), (1,), FLOATS4, r"offset 1099511627776 reach element"),
}
MALFORMED = {
    "a size just too big": (0, (64,), (1,), FLOATS4, r"reach element 63, but the storage holds 4 elements"),
    "an offset plus size past the end": (2, (3,), (1,), FLOATS4, r"offset 2 reach element 4, but .* holds 4 elem"),
    "a negative size": (0, (-1,), (1,), FLOATS4, r"size \(-1,\), not a tuple of non-negative ints"),
    "a negative stride": (3, (2,), (-1,), FLOATS4, r"stride \(-1,\), not a tuple of non-negative ints"),
    "a negative offset": (-1, (1,), (1,), FLOATS4, r"storage offset -1, not a non-negative int"),
    "a float size": (0, (2.0,), (1,), FLOATS4, r"size \(2.0,\), not a tuple"),
    "sizes and strides of different lengths": (0, (2, 2), (1,), FLOATS4, r"2 sizes \(2, 2\) but 1 strides \(1,\)"),
    "an impossibly big expanded tensor": (
        0,
        (1 << 40, 1 << 40),
        (0, 0),
        FLOATS4,
        r"needs 4835703278458516698824704 by",
    ),
    "a storage of part of an element": (0, (1,), (1,), b"\0" * 6, r"holds 6 bytes, not a whole number of dtypes.float"),
}


def malformed_checkpoint(path: pathlib.Path, offset, size, stride, data) -> str:
    """A good tensor, then 'layer.weight' with the given layout over a storage of its own."""
    tensors = {"fine": tensor_opcodes("FloatStorage", "0", 0, (4,), (1,)),
               "layer.weight": tensor_opcodes("FloatStorage", "1", offset, size, stride)}  # fmt: skip
    return write_checkpoint(path, tensors, {"0": FLOATS4, "1": data})


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_tensors_are_refused_naming_the_key(tmp_path, case):
    *layout, message = MALFORMED[case]
    path = malformed_checkpoint(tmp_path / "bad.pt", *layout)
    with pytest.raises(ValueError, match=rf"torch_load: {path}: tensor 'layer.weight' .*{message}"):
        torch_load(path, device="PYTHON")


def test_layouts_far_outside_their_storage_are_refused_not_read(tmp_path):
    paths = [malformed_checkpoint(tmp_path / f"bad{i}.pt", *case[:4]) for i, case in enumerate(FAR_OUTSIDE.values())]
    child = (
        "import sys; from lazy.nn.state import torch_load\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        torch_load(path, device='PYTHON')\n"
        "        print('loaded')\n"
        "    except ValueError as e:\n"
        "        print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", child, *paths], capture_output=True, text=True)
    assert proc.returncode == 0, f"torch_load crashed (exit {proc.returncode}): {proc.stderr[-2000:]}"
    for path, line, (name, case) in zip(paths, proc.stdout.splitlines(), FAR_OUTSIDE.items(), strict=True):
        assert re.search(rf"torch_load: {path}: tensor 'layer.weight' .*{case[-1]}", line), (name, line)


def test_malformed_archives_and_pickles_are_refused_by_name(tmp_path):
    tensor = tensor_opcodes("FloatStorage", "0", 0, (4,), (1,))
    missing = write_checkpoint(tmp_path / "missing.pt", {"w": tensor}, {})
    with pytest.raises(ValueError, match=r"has no record ckpt/data/0 \(the storage of tensor 'w'\)"):
        torch_load(missing)
    truncated = tmp_path / "truncated.pt"
    with zipfile.ZipFile(truncated, "w") as z:
        z.writestr("ckpt/data.pkl", b"\x80\x02ccollections\nOrderedDict\n)R(" + plain("w") + tensor[:40])
    with pytest.raises(ValueError, match=r"ckpt/data.pkl is not a valid pickle"):
        torch_load(truncated)
    few_args = write_checkpoint(tmp_path / "few.pt", {"w": b"ctorch._utils\n_rebuild_tensor_v2\n(K\x00tR"}, {})
    with pytest.raises(ValueError, match=r"tensor 'w' is rebuilt from 1 arguments"):
        torch_load(few_args)
    complex_storage = write_checkpoint(tmp_path / "complex.pt", {"w": tensor_opcodes("ComplexFloatStorage", "0", 0,
                                       (1,), (1,))}, {"0": FLOATS4})  # fmt: skip
    with pytest.raises(pickle.UnpicklingError, match="torch.ComplexFloatStorage, a dtype lazy cannot load"):
        torch_load(complex_storage)


def test_unsigned_checkpoints_written_through_untyped_storages(tmp_path):
    """torch writes uint16/uint32/uint64 and float8 tensors with `_rebuild_tensor_v3` (an untyped storage, the dtype
    as an argument); they were refused as if the file could run code. A dtype lazy lacks says so."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: checkpoints are written with it")
    path = tmp_path / "u.pt"
    for dt in (torch.uint16, torch.uint32, torch.uint64):
        t = torch.arange(6, dtype=torch.int64).to(dt).reshape(2, 3)
        torch.save({"w": t, "v": t[:, 1:], "f": torch.ones(2)}, path)
        got = torch_load(path)
        np.testing.assert_array_equal(got["w"].numpy(), t.to(torch.int64).numpy())
        np.testing.assert_array_equal(got["v"].numpy(), t[:, 1:].to(torch.int64).numpy())
    # float8 comes the same way; lazy has E4M3 ("fn") and E5M2, not the "fnuz" variants
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = torch.tensor([0.0, -0.5, 1.75, 448.0, 2.0**-9, -3.0], dtype=torch.float32).to(dt).reshape(2, 3)
        torch.save({"w": t, "v": t.T}, path)
        got = torch_load(path)
        for key, want in (("w", t), ("v", t.T)):
            assert got[key].dtype == {torch.float8_e4m3fn: dtypes.fp8e4m3, torch.float8_e5m2: dtypes.fp8e5m2}[dt]
            np.testing.assert_array_equal(got[key].cast(dtypes.float32).numpy(), want.float().numpy())
    torch.save({"w": torch.ones(3, dtype=torch.float8_e4m3fnuz)}, path)
    with pytest.raises(Exception, match="float8_e4m3fnuz tensors, a dtype lazy cannot load"):
        torch_load(path)


def test_a_checkpoint_of_nested_dicts_and_lists_keeps_its_structure(tmp_path):
    """A training checkpoint (`{"model": state_dict, "optimizer": ..., "epoch": 3}`) loads as torch.load gives it:
    nested dicts, lists and tuples with Tensors where the tensors were, other values as they are (these tensors were
    dropped, silently, when only the top level was read)."""
    torch = pytest.importorskip("torch", reason="writes the checkpoint with torch.save")
    w = torch.arange(6.0).reshape(2, 3)
    path = tmp_path / "nested.pt"
    torch.save({"model": {"w": w, "b": w[1]}, "layers": [w.T, (w * 2, 7)], "epoch": 3, "name": "run"}, path)
    got = torch_load(path, device="PYTHON")
    assert sorted(got) == ["epoch", "layers", "model", "name"] and got["epoch"] == 3 and got["name"] == "run"
    np.testing.assert_array_equal(got["model"]["w"].numpy(), w.numpy())
    np.testing.assert_array_equal(got["model"]["b"].numpy(), [3, 4, 5])
    layers = got["layers"]
    assert isinstance(layers, list) and isinstance(layers[1], tuple) and layers[1][1] == 7
    np.testing.assert_array_equal(layers[0].numpy(), w.numpy().T)
    np.testing.assert_array_equal(layers[1][0].numpy(), w.numpy() * 2)
    single = tmp_path / "single.pt"
    torch.save(w, single)
    with pytest.raises(ValueError, match="holds a single tensor, not a dict of tensors"):
        torch_load(single)
