"""Model state: find a model's tensors by attribute path, load them back with shape and dtype checks, and read and
write safetensors files through the `DISK` device (loads are zero-copy views of the file; saves are atomic)."""

from __future__ import annotations

import collections
import io
import json
import os
import pathlib
import pickle
import struct
import uuid
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from lazy.device import Buffer
from lazy.dtype import DType, dtypes, to_np_dtype
from lazy.helpers import all_int, prod
from lazy.tensor import Tensor


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted path."""
    if isinstance(obj, Tensor):
        return {prefix.strip("."): obj}
    if hasattr(obj, "_asdict"):
        return get_state_dict(obj._asdict(), prefix)
    items: Any
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(obj))
    elif hasattr(obj, "__dict__"):
        items = vars(obj).items()
    else:
        return {}
    out: dict[str, Tensor] = {}
    for k, v in items:
        out.update(get_state_dict(v, f"{prefix}{k}."))
    return out


def get_parameters(obj: Any) -> list[Tensor]:
    return list(get_state_dict(obj).values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
    """Copy `state_dict` into the model's tensors; refuses missing, extra or mis-shaped entries when `strict`."""
    model_state = get_state_dict(model)
    missing = sorted(set(model_state) - set(state_dict))
    extra = sorted(set(state_dict) - set(model_state))
    if strict and (missing or extra):
        raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {extra}")
    for key, target in model_state.items():
        if key not in state_dict:
            continue
        value = state_dict[key]
        if value.shape != target.shape:
            raise ValueError(f"load_state_dict: {key} has shape {value.shape}, the model expects {target.shape}")
        if value.dtype != target.dtype:
            raise TypeError(f"load_state_dict: {key} has dtype {value.dtype}, the model expects {target.dtype}")
        target.replace(value.to(target.device)).realize()


# ---------------------------------------------------------------------------------------------------------------------
# safetensors: an 8-byte little-endian header length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets"}},
# optional "__metadata__": {str: str}), then the data; offsets count from the first byte after the header.

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
    "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}  # fmt: skip
SAFETENSORS_NAMES: dict[DType, str] = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
MAX_HEADER = 100 << 20  # the safetensors library's own limit on the JSON header


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: where its bytes are, counted from the start of the file."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    start: int
    end: int


def _refuse(path: Any, problem: str) -> ValueError:
    return ValueError(f"{path}: not a valid safetensors file: {problem}")


def _read_header(path: pathlib.Path) -> tuple[list[TensorEntry], dict[str, str]]:
    """Parse and check the whole header against the file's size, before anything is created from it."""
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        if file_size < 8:
            raise _refuse(path, f"it is {file_size} bytes long, shorter than the 8-byte header length")
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > min(MAX_HEADER, file_size - 8):
            raise _refuse(path, f"the header claims {header_len} bytes but the file holds {file_size - 8} after the "
                                "length (truncated or not safetensors)")  # fmt: skip
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _refuse(path, f"the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise _refuse(path, f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _refuse(path, "__metadata__ must map strings to strings")
    data_start, data_size = 8 + header_len, file_size - 8 - header_len
    entries = sorted((_parse_entry(path, name, info, data_start) for name, info in header.items()),
                     key=lambda e: (e.start, e.end))  # fmt: skip
    pos = data_start
    for entry in entries:
        if entry.start < pos:
            where = f"data_offsets start at {entry.start - data_start}, the previous tensor ends at {pos - data_start}"
            raise _refuse(path, f"tensor {entry.name!r} overlaps the tensor before it ({where})")
        if entry.start > pos:
            raise _refuse(path, f"{entry.start - pos} bytes before tensor {entry.name!r} belong to no tensor")
        pos = entry.end
    if pos - data_start != data_size:
        what = "truncated" if pos - data_start > data_size else "has trailing bytes after the last tensor"
        raise _refuse(path, f"the tensors need {pos - data_start} data bytes but the file holds {data_size}: {what}")
    return entries, metadata


def _parse_entry(path: pathlib.Path, name: str, info: Any, data_start: int) -> TensorEntry:
    if not isinstance(info, dict):
        raise _refuse(path, f"entry {name!r} is not an object")
    dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise _refuse(path, f"tensor {name!r} has unknown dtype {info.get('dtype')!r} (known: "
                            f"{', '.join(SAFETENSORS_DTYPES)})")  # fmt: skip
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise _refuse(path, f"tensor {name!r} has shape {shape!r}, not a list of non-negative ints")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)):
        raise _refuse(path, f"tensor {name!r} has data_offsets {offsets!r}, not [start, end]")
    start, end = offsets
    if end - start != prod(shape) * dtype.itemsize:
        raise _refuse(path, f"tensor {name!r} of shape {tuple(shape)} and dtype {info['dtype']} needs "
                            f"{prod(shape) * dtype.itemsize} bytes, but its data_offsets {offsets} span "
                            f"{end - start}")  # fmt: skip
    return TensorEntry(name, dtype, tuple(shape), data_start + start, data_start + end)


def safe_load_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The `__metadata__` of a safetensors file (empty when it has none). The whole header is checked."""
    return _read_header(pathlib.Path(path))[1]


def safe_load(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The tensors of a safetensors file, on device `DISK:<path>`: views of the memory-mapped file, nothing read yet.
    `.to(device)` copies one tensor straight out of the file. A truncated or corrupt file is refused (ValueError)
    before any tensor is made."""
    path = pathlib.Path(path)
    entries, _ = _read_header(path)
    disk = Tensor(path).realize()  # (file_size,) uint8 on DISK:<path>, mapped now: later saves over path don't move it
    out: dict[str, Tensor] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        if prod(entry.shape) == 0:
            out[entry.name] = Tensor.empty(*entry.shape, dtype=entry.dtype, device=disk.device)
            continue
        view = disk[entry.start : entry.end].lazydata.buffer_view(entry.dtype)  # same bytes, no kernel
        assert view is not None, "a slice of a whole file is always one consecutive range"
        out[entry.name] = Tensor(view, device=disk.device).reshape(entry.shape)
    return out


def _plain_buffer(tensor: Tensor) -> Buffer:
    """The realized buffer holding exactly `tensor`'s elements in order (a kernel only for a non-plain view)."""
    lb = tensor.lazydata
    plain = lb.buffer_view() or lb.contiguous()
    Tensor(plain, device=tensor.device).realize()
    buf = plain.base.buffer
    assert buf.nbytes == tensor.nbytes(), f"{buf} does not hold exactly {tensor.shape}"
    return buf.ensure_allocated()


def _safetensors_header(tensors: dict[str, Tensor], metadata: dict[str, str] | None) -> bytes:
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"safe_save: {name!r} cannot name a tensor (names are strings other than __metadata__)")
        if not isinstance(tensor, Tensor) or not all_int(tensor.shape):
            raise TypeError(f"safe_save: {name!r} must be a Tensor with a concrete shape, not {tensor!r}")
        if (dtype_name := SAFETENSORS_NAMES.get(tensor.dtype)) is None:
            raise TypeError(f"safe_save: {name!r} has dtype {tensor.dtype}, which safetensors cannot hold")
        header[name] = {
            "dtype": dtype_name,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + tensor.nbytes()],
        }
        offset += tensor.nbytes()
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as the safetensors library writes it
    return struct.pack("<Q", len(raw)) + raw


def safe_save(tensors: dict[str, Tensor], path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to a safetensors file through the `DISK` device, atomically and durably: the data goes to a
    temporary file in the same directory, which is fsynced and then renamed over `path` (and the directory fsynced).
    A failure part way leaves the old file as it was and no temporary file behind."""
    from lazy.engine.realize import BufferCopy
    from lazy.plugins import Device

    path = pathlib.Path(path)
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("safe_save: metadata must map strings to strings")
    header = _safetensors_header(tensors, metadata)
    sources = [_plain_buffer(t) for t in tensors.values()]  # every kernel runs before the file is touched
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    disk_name = f"DISK:{tmp}"
    total = len(header) + sum(src.nbytes for src in sources)
    file_buf: Buffer | None = None
    try:
        file_buf = Tensor.empty(total, dtype=dtypes.uint8, device=disk_name).realize().lazydata.base.buffer
        file_buf.view(len(header), dtypes.uint8, 0).ensure_allocated().copyin(header)
        offset = len(header)
        for src in sources:
            dest = file_buf.view(src.nbytes, dtypes.uint8, offset).ensure_allocated()
            BufferCopy(src.nbytes, disk_name, src.device)([dest, src], {})
            offset += src.nbytes
        Device[disk_name].synchronize()  # DISK: msync + fsync, the data is on stable storage
        file_buf.deallocate()
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)  # the new file keeps the old one's permissions
        os.replace(tmp, path)
    except BaseException:
        if file_buf is not None:
            file_buf.deallocate()
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: pathlib.Path) -> None:
    """Make a rename in `directory` durable (POSIX; a no-op where directories cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------------------
# PyTorch checkpoints (`torch.save`'s zip format) without importing torch: a restricted unpickler that understands
# only what a state dict holds (ordered dicts, tensors rebuilt from storages, parameters), so loading a file cannot
# run arbitrary code.

TORCH_STORAGES: dict[str, DType] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}  # fmt: skip


@dataclass(frozen=True)
class _TorchStorage:
    dtype: DType
    key: str


def _rebuild_tensor(
    storage: _TorchStorage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any
) -> Any:
    return ("tensor", storage, offset, tuple(size), tuple(stride))


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


class _TorchUnpickler(pickle.Unpickler):
    ALLOWED: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    }

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in TORCH_STORAGES:
            return TORCH_STORAGES[name]
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        raise pickle.UnpicklingError(f"torch_load: the checkpoint refers to {module}.{name}, which a state dict "
                                     "does not need; refusing to load it (it could run code)")  # fmt: skip

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage" and isinstance(pid[1], DType)):
            raise pickle.UnpicklingError(f"torch_load: unknown persistent id {pid!r}")
        return _TorchStorage(pid[1], str(pid[2]))


def torch_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """Tensors of a PyTorch checkpoint (`torch.save` of a state dict, zip format), without importing torch."""
    path = pathlib.Path(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(f"torch_load: {path} is not a zip-format PyTorch checkpoint (torch.save since 1.6); re-save "
                         "it with a current torch, or convert it to safetensors")  # fmt: skip
    with zipfile.ZipFile(path) as archive:
        pkl = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise ValueError(f"torch_load: {path} has no data.pkl: not a PyTorch checkpoint")
        root = pkl[: -len("data.pkl")]
        state = _TorchUnpickler(io.BytesIO(archive.read(pkl))).load()
        if not isinstance(state, dict):
            raise ValueError(f"torch_load: {path} holds a {type(state).__name__}, not a state dict")
        storages: dict[str, bytes] = {}

        def build(entry: Any) -> Tensor:
            _, storage, offset, size, stride = entry
            if storage.key not in storages:
                storages[storage.key] = archive.read(f"{root}data/{storage.key}")
            flat = np.frombuffer(storages[storage.key], dtype=to_np_dtype(storage.dtype))
            item = flat.itemsize
            view = np.lib.stride_tricks.as_strided(flat[offset:], size, tuple(s * item for s in stride))
            arr = view.copy()  # contiguous, and 0-d stays 0-d
            if storage.dtype == dtypes.bfloat16:  # held as uint16 bits: keep the bits, type them as bfloat16
                return Tensor(arr.view(np.uint16), device=device).bitcast(dtypes.bfloat16)
            return Tensor(arr, device=device)

        return {str(k): build(v) for k, v in state.items() if isinstance(v, tuple) and v and v[0] == "tensor"}
