"""safetensors through the DISK device: round trips of every dtype, interchange with the `safetensors` package, bad
files refused before any tensor exists, atomic saves (a crash leaves the old file; the next save removes what a
killed one left behind), and state dicts through a file."""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

from lazy.dtype import dtypes
from lazy.engine.schedule import create_schedule
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.tensor import Tensor

pytest.importorskip("lazy_disk", reason="the DISK device plugin (plugins/lazy-disk) is not installed")
from lazy.nn.state import (  # noqa: E402
    SAFETENSORS_DTYPES,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)

SHAPES = [(), (1,), (3, 5), (2, 0, 3), (4, 1, 7)]


def random_bits(dtype, shape, seed=0) -> np.ndarray:
    """Random bytes as a numpy array of `dtype` (bfloat16: its uint16 bits); bools are 0/1."""
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    if dtype == dtypes.bool:
        raw &= 1
    if dtype.fmt is not None and dtypes.is_float(dtype):  # no NaNs: they would not compare equal
        values = raw.view(np.dtype(dtype.fmt))
        values[~np.isfinite(values)] = 1
    return raw


BITS = {1: np.uint8, 2: np.uint16}  # the unsigned type whose bits carry a dtype numpy lacks (bfloat16, fp8)


def tensor_of(dtype, shape, seed=0) -> Tensor:
    raw = random_bits(dtype, shape, seed)
    if dtype.fmt is None:
        return Tensor(raw.view(BITS[dtype.itemsize]).reshape(shape), device="CPU").bitcast(dtype)
    return Tensor(raw.view(np.dtype(dtype.fmt)).reshape(shape), device="CPU")


def raw_bytes(t: Tensor) -> bytes:
    t = t.to("CPU")
    if t.dtype.fmt is None:
        t = t.bitcast(dtypes.uint8 if t.dtype.itemsize == 1 else dtypes.uint16)
    return t.numpy().tobytes()


@pytest.mark.parametrize("name", list(SAFETENSORS_DTYPES))
def test_every_dtype_round_trips(tmp_path, name):
    dtype = SAFETENSORS_DTYPES[name]
    tensors = {f"t{i}": tensor_of(dtype, shape, seed=i) for i, shape in enumerate(SHAPES)}
    safe_save(tensors, tmp_path / "m.safetensors")
    loaded = safe_load(tmp_path / "m.safetensors")
    assert sorted(loaded) == sorted(tensors)
    for key, want in tensors.items():
        got = loaded[key]
        assert got.device == f"DISK:{tmp_path / 'm.safetensors'}"
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        assert raw_bytes(got) == raw_bytes(want), key


def test_metadata_round_trips(tmp_path):
    path = tmp_path / "m.safetensors"
    safe_save({"x": Tensor([1.0, 2.0], device="CPU")}, path, metadata={"format": "pt", "note": "ünïcode"})
    assert safe_load_metadata(path) == {"format": "pt", "note": "ünïcode"}
    safe_save({"x": Tensor([1.0], device="CPU")}, path)
    assert safe_load_metadata(path) == {}


def test_loading_is_one_copy_and_no_kernel(tmp_path):
    path = tmp_path / "m.safetensors"
    safe_save({"w": Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="CPU")}, path)
    w = safe_load(path)["w"]
    ops = [si.ast.op for si in create_schedule([w.to("CPU").lazydata])]
    assert ops.count(Ops.COPY) == 1 and Ops.SINK not in ops, ops
    base = w.lazydata.base
    assert base.op is Ops.BUFFER_VIEW and base.buffer.base is not None, "a view of the file's buffer, not a copy"
    assert np.array_equal(w.to("CPU").numpy(), np.arange(12).reshape(3, 4))


# --- the safetensors package ------------------------------------------------------------------------------------------

st_numpy = pytest.importorskip("safetensors.numpy")
NUMPY_DTYPES = [d for d in SAFETENSORS_DTYPES.values() if d.fmt is not None]  # numpy has no bfloat16 and no fp8


def test_a_file_written_by_lazy_is_read_by_safetensors(tmp_path):
    path = tmp_path / "lazy.safetensors"
    arrays = {f"{d.name}": random_bits(d, (3, 4), seed=i).view(np.dtype(d.fmt)).reshape(3, 4)
              for i, d in enumerate(NUMPY_DTYPES)}  # fmt: skip
    safe_save({k: Tensor(v, device="CPU") for k, v in arrays.items()}, path, metadata={"a": "b"})
    loaded = st_numpy.load_file(str(path))
    assert sorted(loaded) == sorted(arrays)
    for key, want in arrays.items():
        assert loaded[key].dtype == want.dtype and np.array_equal(loaded[key], want), key
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        assert f.metadata() == {"a": "b"}


def test_a_file_written_by_safetensors_is_read_by_lazy(tmp_path):
    path = tmp_path / "theirs.safetensors"
    arrays = {f"{d.name}": random_bits(d, (2, 3, 5), seed=i).view(np.dtype(d.fmt)).reshape(2, 3, 5)
              for i, d in enumerate(NUMPY_DTYPES)}  # fmt: skip
    arrays["scalar"], arrays["empty"] = np.array(3.5, np.float32), np.zeros((0, 4), np.int16)
    st_numpy.save_file(arrays, str(path), metadata={"framework": "numpy"})
    loaded = safe_load(path)
    assert safe_load_metadata(path) == {"framework": "numpy"}
    for key, want in arrays.items():
        got = loaded[key].to("CPU").numpy()
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), key


def test_bfloat16_and_float8_interchange_with_torch(tmp_path):
    """The dtypes numpy lacks, through the `safetensors` package's torch side: lazy reads torch's files and writes
    files torch reads, value for value (special values included: the largest finite, subnormals, E5M2's infinity)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the torch side of the check needs it")
    st_torch = pytest.importorskip("safetensors.torch")
    values = {
        "F8_E4M3": ([0.0, -0.0, 0.5, -1.75, 448.0, -448.0, 2.0**-9, 2.0**-6, 3.25], torch.float8_e4m3fn),
        "F8_E5M2": ([0.0, 0.5, -3.0, 57344.0, float("inf"), float("-inf"), 2.0**-16, 1.5], torch.float8_e5m2),
        "BF16": ([0.0, 1.0, -2.5, 3.0e38, 1.0e-40, float("inf")], torch.bfloat16),
    }
    theirs = {name: torch.tensor(v, dtype=torch.float32).to(dt) for name, (v, dt) in values.items()}
    st_torch.save_file(theirs, str(tmp_path / "theirs.safetensors"))
    loaded = safe_load(tmp_path / "theirs.safetensors")
    for name, want in theirs.items():
        got = loaded[name].to("CPU")
        assert got.dtype == SAFETENSORS_DTYPES[name], name
        assert np.array_equal(got.cast(dtypes.float32).numpy(), want.float().numpy()), name
    path = tmp_path / "lazy.safetensors"
    safe_save({name: Tensor(v, device="CPU").cast(SAFETENSORS_DTYPES[name]) for name, (v, _) in values.items()}, path)
    for name, got in st_torch.load_file(str(path)).items():
        assert got.dtype == theirs[name].dtype, name
        assert torch.equal(got.view(torch.uint8), theirs[name].view(torch.uint8)), name


# --- bad files --------------------------------------------------------------------------------------------------------


def write_raw(path: pathlib.Path, header: dict | bytes, data: bytes, length: int | None = None) -> pathlib.Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


GOOD = {
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]},
}
BAD_FILES = {
    "shorter than the 8-byte": lambda p: p.write_bytes(b"\x01\x02") and p,
    "the header claims": lambda p: write_raw(p, GOOD, b"\0" * 12, length=1 << 40),
    "not valid JSON": lambda p: write_raw(p, b"{not json", b""),
    "not an object": lambda p: write_raw(p, [1, 2], b""),
    "unknown dtype 'F8'": lambda p: write_raw(p, {"a": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
    "needs 8 bytes, but its data_offsets": lambda p: write_raw(
        p, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4
    ),
    "overlaps": lambda p: write_raw(p, {**GOOD, "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}, b"\0" * 8),
    "belong to no tensor": lambda p: write_raw(
        p, {**GOOD, "b": {"dtype": "U8", "shape": [4], "data_offsets": [9, 13]}}, b"\0" * 13
    ),
    "truncated": lambda p: write_raw(p, GOOD, b"\0" * 11),
    "trailing bytes": lambda p: write_raw(p, GOOD, b"\0" * 13),
    "not a list of non-negative ints": lambda p: write_raw(
        p, {"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}, b""
    ),
    "__metadata__ must map strings": lambda p: write_raw(p, {**GOOD, "__metadata__": {"k": 1}}, b"\0" * 12),
    "__metadata__ must map strings to strings": lambda p: write_raw(p, {**GOOD, "__metadata__": []}, b"\0" * 12),
    "nests JSON arrays or objects too deeply": lambda p: write_raw(p, b"[" * 100_000 + b"]" * 100_000, b""),
    "integer string conversion": lambda p: write_raw(p, b'{"a": ' + b"1" * 5000 + b"}", b""),
    "'a' has unknown dtype": lambda p: write_raw(
        p, {"a": {"dtype": ["F32"], "shape": [], "data_offsets": [0, 4]}}, b"\0" * 4
    ),
}


@pytest.mark.parametrize("problem", list(BAD_FILES))
def test_bad_files_are_refused_before_any_tensor_exists(tmp_path, problem):
    path = tmp_path / "bad.safetensors"
    BAD_FILES[problem](path)
    with pytest.raises(ValueError, match=rf"{path}: not a valid safetensors file: .*{problem}"):
        safe_load(path)
    assert Device.opened(f"DISK:{path}") is None, "nothing may touch the file's DISK device before it is checked"


def test_a_truncated_copy_of_a_real_file_is_refused(tmp_path):
    path = tmp_path / "m.safetensors"
    safe_save({"w": Tensor(np.arange(1000, dtype=np.float32), device="CPU")}, path)
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) // 2, 12):
        cut_path = tmp_path / f"cut{cut}.safetensors"
        cut_path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=str(cut_path)):
            safe_load(cut_path)


def test_null_metadata_is_no_metadata(tmp_path):
    """The safetensors library may write `"__metadata__": null`."""
    path = write_raw(tmp_path / "m.safetensors", {**GOOD, "__metadata__": None}, b"\0" * 12)
    assert safe_load_metadata(path) == {} and sorted(safe_load(path)) == ["a", "b"]


def test_a_file_replaced_between_its_header_and_its_mapping_is_refused(tmp_path, monkeypatch):
    """The checked header must describe the file that is mapped, not one another program has put there since."""
    path = tmp_path / "m.safetensors"
    safe_save({"w": Tensor(np.arange(4, dtype=np.float32), device="CPU")}, path)
    from lazy.nn import state

    real_read_header = state._read_header

    def read_then_replace(p):
        checked = real_read_header(p)
        safe_save({"w": Tensor(np.arange(400, dtype=np.float32), device="CPU")}, path)
        return checked

    monkeypatch.setattr(state, "_read_header", read_then_replace)
    with pytest.raises(ValueError, match=rf"{path} changed while it was being loaded"):
        safe_load(path)


def test_bad_input_to_safe_save(tmp_path):
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": Tensor([1], device="CPU")}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="metadata must map strings"):
        safe_save({"a": Tensor([1], device="CPU")}, tmp_path / "x.safetensors", metadata={"k": 1})  # type: ignore
    assert list(tmp_path.iterdir()) == []


# --- atomic, durable saves --------------------------------------------------------------------------------------------


def old_file(tmp_path) -> tuple[pathlib.Path, bytes]:
    path = tmp_path / "model.safetensors"
    safe_save({"old": Tensor(np.arange(100, dtype=np.float32), device="CPU")}, path)
    return path, path.read_bytes()


def new_tensors() -> dict[str, Tensor]:
    return {f"new{i}": Tensor(np.full(1000, i, np.float32), device="CPU") for i in range(3)}


def test_a_failure_mid_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path, before = old_file(tmp_path)
    from lazy.engine import realize

    real_call, calls = realize.BufferCopy.__call__, []

    def crash_on_second_copy(self, bufs, var_vals, wait=False):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device (simulated)")
        return real_call(self, bufs, var_vals, wait)

    monkeypatch.setattr(realize.BufferCopy, "__call__", crash_on_second_copy)
    with pytest.raises(OSError, match="simulated"):
        safe_save(new_tensors(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"], "the temporary file was left behind"


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path, before = old_file(tmp_path)

    def failing_replace(src, dst):
        raise OSError("rename failed (simulated)")

    monkeypatch.setattr("lazy.nn.state.os.replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        safe_save(new_tensors(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


KILLED_MID_SAVE = """
import os, signal, sys
import numpy as np
from lazy.tensor import Tensor
from lazy.engine import realize
from lazy.nn.state import safe_save
real, calls = realize.BufferCopy.__call__, []
def die(self, bufs, var_vals, wait=False):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no cleanup of any kind runs
    return real(self, bufs, var_vals, wait)
realize.BufferCopy.__call__ = die
safe_save({f"new{i}": Tensor(np.full(1000, i, np.float32), device="CPU") for i in range(3)}, sys.argv[1])
"""


def temporaries(path: pathlib.Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


def test_a_process_killed_mid_save_leaves_the_old_file_and_the_next_save_cleans_up(tmp_path):
    """A real crash (kill -9, no cleanup runs): the old file is intact and only a hidden temporary file of the full
    size remains, which the next save of the same file removes."""
    path, before = old_file(tmp_path)
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_SAVE, str(path)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert path.read_bytes() == before
    assert len(temporaries(path)) == 1 and sorted(p.name for p in tmp_path.iterdir()) == [*temporaries(path), path.name]
    safe_save(new_tensors(), path)
    assert temporaries(path) == [], "the next save must remove the killed save's temporary file"
    assert sorted(safe_load(path)) == ["new0", "new1", "new2"]


def test_temporaries_of_live_saves_and_other_files_are_kept(tmp_path):
    """A save removes only its own file's temporaries whose process is gone and that no one locks."""
    path, _ = old_file(tmp_path)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # its pid is now free: no process runs under it (reuse this soon is vanishingly unlikely)
    dead, alive = finished.pid, os.getpid()
    names = {
        "live process": f".{path.name}.{alive}.{'a' * 12}.tmp",
        "locked (a save on another host)": f".{path.name}.{dead}.{'b' * 12}.tmp",
        "another target's": f".{path.name}.1.{dead}.{'c' * 12}.tmp",
        "stale": f".{path.name}.{dead}.{'d' * 12}.tmp",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"partial")
    with open(tmp_path / names["locked (a save on another host)"], "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        safe_save(new_tensors(), path)
    left = {p.name for p in tmp_path.iterdir()}
    for what, name in names.items():
        assert (name in left) == (what != "stale"), (
            f"the {what} temporary file {name} was wrongly {'kept' if name in left else 'removed'}"
        )


def test_saving_over_a_loaded_file_keeps_the_loaded_tensors_valid(tmp_path):
    path, _ = old_file(tmp_path)
    old = safe_load(path)["old"]
    safe_save({"old": Tensor(np.zeros(100, np.float32), device="CPU")}, path)
    assert np.array_equal(old.to("CPU").numpy(), np.arange(100)), "the old file's pages stay with the old tensors"
    assert np.array_equal(safe_load(path)["old"].to("CPU").numpy(), np.zeros(100))


def test_saving_keeps_the_old_files_permissions(tmp_path):
    path, _ = old_file(tmp_path)
    os.chmod(path, 0o640)
    safe_save(new_tensors(), path)
    assert path.stat().st_mode & 0o777 == 0o640


# --- state dicts through a file ---------------------------------------------------------------------------------------


class Linear:
    def __init__(self, n_in: int, n_out: int, seed: int):
        rng = np.random.default_rng(seed)
        self.weight = Tensor(rng.standard_normal((n_out, n_in), dtype=np.float32), device="CPU")
        self.bias = Tensor(rng.standard_normal(n_out, dtype=np.float32), device="CPU")


class Model:
    def __init__(self, seed: int):
        self.layers = [Linear(4, 8, seed), Linear(8, 2, seed + 1)]
        self.scale = Tensor(np.float16(seed), device="CPU")


def test_state_dict_round_trip_through_a_file(tmp_path):
    path = tmp_path / "model.safetensors"
    source, target = Model(1), Model(2)
    safe_save(get_state_dict(source), path)
    loaded = safe_load(path)
    assert sorted(loaded) == sorted(get_state_dict(source))
    load_state_dict(target, loaded)
    for key, tensor in get_state_dict(target).items():
        assert tensor.device == "CPU", key
        np.testing.assert_array_equal(tensor.numpy(), get_state_dict(source)[key].numpy())
