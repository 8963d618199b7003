"""Model state: find a model's tensors by attribute path, load them back (shapes checked, cast to the model's dtypes),
read and write safetensors files through `DISK` (zero-copy loads, atomic saves), read PyTorch checkpoints without
torch; large loads and saves show a progress line. Files are untrusted: every number in them is checked before use."""

from __future__ import annotations

import collections
import io
import json
import os
import pathlib
import pickle
import re
import struct
import sys
import uuid
import zipfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from lazy.device import Buffer
from lazy.dtype import DType, dtypes, to_np_dtype
from lazy.helpers import DEBUG, ShapeError, all_int, prod
from lazy.progress import progress
from lazy.record import record
from lazy.tensor import Tensor

if sys.platform != "win32":
    import fcntl
if TYPE_CHECKING:
    import numpy as np

PROGRESS_MIN_BYTES = 64 << 20  # loads and saves of fewer bytes show no progress line (they are over in moments)


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


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:  # fmt: skip
    """Replace the model's tensors by the entries of `state_dict` with the same dotted path, cast to the model's dtype
    and moved to its device (PyTorch's copy; tinygrad takes the loaded dtype: a float `num_batches_tracked` into an
    int buffer loads either way). Shapes must match, except () against (1,) (tinygrad's rule). Missing entries raise
    a KeyError when `strict` (as tinygrad, which also ignores entries the model lacks; LAZY_DEBUG>=1 lists both);
    `consume` deletes the loaded entries from `state_dict`, `realize=False` leaves the loads lazy. Returns the
    loaded tensors. Realized loads of `PROGRESS_MIN_BYTES` or more show their progress (`lazy.progress`) unless
    `verbose` is False."""
    model_state = get_state_dict(model)
    if DEBUG >= 1 and (unused := sorted(set(state_dict) - set(model_state))):
        print("WARNING: unused weights in state_dict", unused)  # (tinygrad's words)
    missing = [key for key in model_state if key not in state_dict]
    if strict and missing:
        raise KeyError(f"load_state_dict: the state dict has no {', '.join(repr(k) for k in missing)} (the model's "
                       "tensors of those names); pass strict=False to leave them as they are")  # fmt: skip
    loaded = []
    keys = [key for key in model_state if key in state_dict]
    nbytes = sum(state_dict[key].nbytes() for key in keys) if realize else 0
    show = verbose and nbytes >= PROGRESS_MIN_BYTES
    with progress(f"loading {len(keys)} tensors", total=nbytes, unit="B", show=show) as bar:
        for key, target in model_state.items():
            if key not in state_dict:
                if DEBUG >= 1:
                    print(f"WARNING: not loading {key}")
                continue
            value = state_dict[key]
            if value.shape != target.shape:
                if {value.shape, target.shape} != {(), (1,)}:
                    raise ShapeError(f"Shape mismatch in layer `{key}`: Expected shape {target.shape}, but found "
                                     f"{value.shape} in state dict.")  # fmt: skip
                value = value.reshape(target.shape)
            # on the model's devices, split as the model's tensor is (a plain `to` of a device tuple replicates)
            axis = getattr(target.lazydata, "axis", None)
            placed = value.shard(target.device, axis) if isinstance(target.device, tuple) else value.to(target.device)
            target.replace(placed.cast(target.dtype))
            if realize:
                target.realize()
                bar.update(value.nbytes())
            if consume:
                del state_dict[key]
            loaded.append(target)
    return loaded


# ---------------------------------------------------------------------------------------------------------------------
# safetensors: an 8-byte little-endian header length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets"}},
# optional "__metadata__": {str: str}), then the data; offsets count from the first byte after the header.

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
    "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2,
}  # fmt: skip
SAFETENSORS_NAMES: dict[DType, str] = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
MAX_HEADER = 100 << 20  # the safetensors library's own limit on the JSON header


@record(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: where its bytes are, counted from the start of the file."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    start: int
    end: int


def _refuse(path: Any, problem: str) -> ValueError:
    return ValueError(f"{path}: not a valid safetensors file: {problem}")


def _file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is replaced (device, inode) or rewritten (size, modification time)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _read_header(path: pathlib.Path) -> tuple[list[TensorEntry], dict[str, str], tuple[int, ...]]:
    """Parse and check the whole header against the file's size, before anything is created from it. Also returns
    the identity of the file that was read (`_file_identity`)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        file_size = st.st_size
        if file_size < 8:
            raise _refuse(path, f"it is {file_size} bytes long, shorter than the 8-byte header length")
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > min(MAX_HEADER, file_size - 8):
            raise _refuse(path, f"the header claims {header_len} bytes but the file holds {file_size - 8} after the "
                                "length (truncated or not safetensors)")  # fmt: skip
        raw = f.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise _refuse(path, "the header nests JSON arrays or objects too deeply to parse (a safetensors header is "
                            "three levels deep: {name: {\"shape\": [...]}})") from None  # fmt: skip
    except ValueError as e:  # not UTF-8, not JSON, or an integer too long to convert
        raise _refuse(path, f"the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise _refuse(path, f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata  # null is how the safetensors library writes "no metadata"
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
    return entries, metadata, _file_identity(st)


def _parse_entry(path: pathlib.Path, name: str, info: Any, data_start: int) -> TensorEntry:
    if not isinstance(info, dict):
        raise _refuse(path, f"entry {name!r} is not an object")
    dtype_name = info.get("dtype")
    dtype = SAFETENSORS_DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None  # a list is not hashable
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
    entries, _, identity = _read_header(path)
    disk = Tensor(path).realize()  # (file_size,) uint8 on DISK:<path>, mapped now: later saves over path don't move it
    if _file_identity(os.stat(path)) != identity:  # the header read belongs to another file than the one mapped
        raise ValueError(f"{path} changed while it was being loaded (replaced or rewritten by another program); load "
                         "it again once it is written")  # fmt: skip
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
    """The realized buffer holding exactly `tensor`'s elements in order (a kernel only for a non-plain view); a
    sharded tensor's whole value, gathered on its first device."""
    if isinstance(tensor.device, tuple):
        tensor = tensor.to(tensor.device[0])
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
    A failure part way leaves the old file as it was and no temporary file behind; the temporary files of a save
    that was killed (no cleanup ran) are removed by the next save of the same path."""
    from lazy.engine.runners import copy_now
    from lazy.plugins import Device

    path = pathlib.Path(path)
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("safe_save: metadata must map strings to strings")
    header = _safetensors_header(tensors, metadata)
    sources = [_plain_buffer(t) for t in tensors.values()]  # every kernel runs before the file is touched
    _remove_stale_temporaries(path)
    total = len(header) + sum(src.nbytes for src in sources)
    tmp, tmp_fd = _create_temporary(path, total)
    disk_name = f"DISK:{tmp}"
    file_buf: Buffer | None = None
    bar = progress(f"saving {path.name}", total=total, unit="B", show=total >= PROGRESS_MIN_BYTES)
    try:
        file_buf = Tensor.empty(total, dtype=dtypes.uint8, device=disk_name).realize().lazydata.base.buffer
        file_buf.view(len(header), dtypes.uint8, 0).ensure_allocated().copyin(header)
        offset = len(header)
        bar.update(len(header))
        for src in sources:
            dest = file_buf.view(src.nbytes, dtypes.uint8, offset).ensure_allocated()
            copy_now(dest, src)
            offset += src.nbytes
            bar.update(src.nbytes)
        bar.update(0, "syncing to disk")
        Device[disk_name].synchronize()  # DISK: msync + fsync, the data is on stable storage
        file_buf.deallocate()
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)  # the new file keeps the old one's permissions
        os.replace(tmp, path)
        bar.close("saved")
    except BaseException:
        bar.close("failed")
        if file_buf is not None:
            file_buf.deallocate()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(tmp_fd)  # and with it the lock that marks the temporary file as in use
    _fsync_directory(path.parent)


# A save's temporary file is `.<name>.<pid>.<random>.tmp`, locked (flock) by the saving process while the save runs.
# A process killed mid-save leaves it behind, full size; the next save of `<name>` removes it once no process of that
# pid runs here and nobody holds its lock. Each covers the other's gap: the lock a save from another host of a
# network file system (its pid means nothing here), the pid a file system without locks.


def _temporary_pattern(path: pathlib.Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.[0-9a-f]{{12}}\.tmp")


def _create_temporary(path: pathlib.Path, size: int) -> tuple[pathlib.Path, int]:
    """A new temporary file of `size` bytes next to `path`, locked by this process: (its path, the locked fd)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        _lock_unless_held(fd)  # a new file: nobody else can hold its lock
        os.ftruncate(fd, size)  # DISK opens an existing file only when it is big enough
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return tmp, fd


def _remove_stale_temporaries(path: pathlib.Path) -> None:
    """Delete the temporary files that killed saves of `path` left: their process is gone and nothing locks them."""
    if sys.platform == "win32":  # os.kill(pid, 0) would end the process there, and there is no flock
        return
    pattern = _temporary_pattern(path)
    try:
        matches = [match for entry in os.scandir(path.parent) if (match := pattern.fullmatch(entry.name))]
    except OSError:  # the directory is unreadable: the save itself will say why
        return
    for match in matches:
        name = match.group(0)
        if _process_alive(int(match.group(1))):
            continue
        try:
            fd = os.open(path.parent / name, os.O_RDONLY)
        except OSError:  # gone already (another save cleaned it), or not ours to open
            continue
        try:
            if _lock_unless_held(fd):
                os.unlink(path.parent / name)
        except OSError:
            pass  # a temporary file that cannot be removed costs space, not correctness
        finally:
            os.close(fd)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        return True
    return True


def _lock_unless_held(fd: int) -> bool:
    """Take an exclusive lock on the open file without waiting. False only when another open file holds one; where
    the file system has no locks, True without a lock (the pid in the name then tells alone)."""
    if sys.platform == "win32":
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK and the like: no locks here
        return True
    return True


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
# run arbitrary code. Every number the file gives (offsets, sizes, strides, storage lengths) is checked before numpy
# makes a view from it: a strided view past its storage reads (or crashes on) whatever memory lies beyond.

TORCH_STORAGES: dict[str, DType] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}  # fmt: skip


@record(frozen=True)
class _TorchStorage:
    dtype: DType
    key: str


@record(frozen=True)
class _TorchTensor:
    """The arguments of a `_rebuild_tensor_v2` call in the pickle, kept as given: they are checked per key later."""

    args: tuple[Any, ...]


def _rebuild_tensor(*args: Any) -> _TorchTensor:
    return _TorchTensor(args)


def _rebuild_tensor_v3(storage: Any = None, *args: Any) -> _TorchTensor:
    """torch's rebuild for dtypes without a typed storage (uint16, uint32, uint64, float8): an untyped storage, and
    the dtype as the seventh argument (offset, size and stride count its elements)."""
    if len(args) >= 6 and isinstance(args[5], DType) and isinstance(storage, _TorchStorage):
        storage = _TorchStorage(args[5], storage.key)
    return _TorchTensor((storage, *args))


def _rebuild_parameter(data: Any = None, *_: Any) -> Any:
    return data


TORCH_DTYPES: dict[str, DType] = {
    "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64, "float8_e4m3fn": dtypes.fp8e4m3,
    "float8_e5m2": dtypes.fp8e5m2,
}  # fmt: skip
UNTYPED_STORAGE = dtypes.uint8  # an untyped storage's bytes; `_rebuild_tensor_v3` names the elements' dtype


class _Refused(pickle.UnpicklingError):
    """The pickle asks for something torch_load will not load: a global a state dict does not need (it could run
    code), or a storage of a dtype lazy lacks. Passed on as it is; any other pickle error means a corrupt file."""


class _TorchUnpickler(pickle.Unpickler):
    ALLOWED: dict[tuple[str, str], Any] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch.storage", "UntypedStorage"): UNTYPED_STORAGE,
    }

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in TORCH_STORAGES:
            return TORCH_STORAGES[name]
        if module == "torch" and name in TORCH_DTYPES:
            return TORCH_DTYPES[name]
        if module == "torch" and (name.startswith(("float", "int", "complex", "uint", "bfloat")) or name == "bool"):
            raise _Refused(f"torch_load: the checkpoint holds torch.{name} tensors, a dtype lazy cannot load; convert "
                           "those tensors first")  # fmt: skip
        if module == "torch" and name.endswith("Storage"):
            loads = ", ".join(TORCH_STORAGES)
            raise _Refused(f"torch_load: the checkpoint holds a torch.{name}, a dtype lazy cannot load (it loads "
                           f"{loads}); convert those tensors first")  # fmt: skip
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        raise _Refused(f"torch_load: the checkpoint refers to {module}.{name}, which a state dict does not need; "
                       "refusing to load it (it could run code)")  # fmt: skip

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage" and isinstance(pid[1], DType)):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}, not ('storage', type, key, ...)")
        return _TorchStorage(pid[1], str(pid[2]))


@record(frozen=True)
class _TorchLayout:
    """Where a tensor's elements are in its storage, in elements: checked, so numpy can view the storage safely."""

    storage: _TorchStorage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _torch_layout(path: pathlib.Path, key: str, tensor: _TorchTensor) -> _TorchLayout:
    """The layout `_rebuild_tensor_v2(storage, offset, size, stride, ...)` asks for, or a ValueError naming `key`."""

    def refuse(problem: str) -> ValueError:
        return ValueError(f"torch_load: {path}: tensor {key!r} {problem}; the checkpoint is corrupt or was not "
                          "written by torch.save")  # fmt: skip

    if len(tensor.args) < 4:
        raise refuse(f"is rebuilt from {len(tensor.args)} arguments, not (storage, offset, size, stride, ...)")
    storage, offset, size, stride = tensor.args[:4]
    if not isinstance(storage, _TorchStorage):
        raise refuse(f"has a {type(storage).__name__} where its storage should be")
    if not (isinstance(size, (tuple, list)) and all(type(d) is int and d >= 0 for d in size)):
        raise refuse(f"has size {size!r}, not a tuple of non-negative ints")
    if not (isinstance(stride, (tuple, list)) and all(type(s) is int and s >= 0 for s in stride)):
        raise refuse(f"has stride {stride!r}, not a tuple of non-negative ints")
    if len(stride) != len(size):
        raise refuse(f"has {len(size)} sizes {tuple(size)} but {len(stride)} strides {tuple(stride)}")
    if type(offset) is not int or offset < 0:
        raise refuse(f"has storage offset {offset!r}, not a non-negative int")
    return _TorchLayout(storage, offset, tuple(size), tuple(stride))


def _torch_array(path: pathlib.Path, key: str, layout: _TorchLayout, data: bytes, big_endian: bool) -> np.ndarray:
    """A contiguous copy of the tensor's elements out of its storage's bytes, after checking they lie inside it."""
    import numpy as np

    storage = layout.storage
    native = np.dtype(to_np_dtype(storage.dtype))
    if 0 in layout.size:  # nothing to read: no extent to check
        return np.empty(layout.size, native)
    where = f"torch_load: {path}: tensor {key!r} (storage {storage.key})"
    if (nbytes := prod(layout.size) * native.itemsize) > sys.maxsize:  # an expanded (stride 0) tensor can claim this
        raise ValueError(f"{where}: size {layout.size} needs {nbytes} bytes, more than any memory can hold")
    if len(data) % native.itemsize:
        raise ValueError(f"{where}: the storage holds {len(data)} bytes, not a whole number of {storage.dtype} "
                         f"elements ({native.itemsize} bytes each); the checkpoint is corrupt")  # fmt: skip
    elements = len(data) // native.itemsize
    extent = layout.offset + sum((d - 1) * s for d, s in zip(layout.size, layout.stride)) + 1
    if extent > elements:
        raise ValueError(f"{where}: size {layout.size}, stride {layout.stride} and offset {layout.offset} reach "
                         f"element {extent - 1}, but the storage holds {elements} elements; the checkpoint is "
                         "corrupt")  # fmt: skip
    flat = np.frombuffer(data, dtype=native.newbyteorder(">" if big_endian else "<"))
    strides = tuple(s * native.itemsize for s in layout.stride)
    view = np.lib.stride_tricks.as_strided(flat[layout.offset :], layout.size, strides, writeable=False)
    return view.astype(native)  # a contiguous copy in this machine's byte order (0-d stays 0-d)


def _read_record(archive: zipfile.ZipFile, path: pathlib.Path, name: str, what: str) -> bytes:
    try:
        return archive.read(name)
    except KeyError:
        raise ValueError(f"torch_load: {path} has no record {name} ({what}): the checkpoint is incomplete") from None
    except Exception as e:  # a damaged archive: bad CRC, truncated or unsupported compression, ...
        raise ValueError(f"torch_load: {path}: cannot read record {name} ({what}): {e}") from None


def torch_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Any]:
    """The dict a PyTorch checkpoint holds (`torch.save` of a state dict, zip format), its tensors as Tensors, read
    without importing torch. Nested dicts, lists and tuples keep their structure, and values that are not tensors
    (an epoch count, a name) come through as they are, as with `torch.load` (`{"model": state_dict, "epoch": 3}`);
    the top level's keys are strings. A malformed checkpoint raises ValueError naming the tensor (by its path:
    `model.layer.weight`) and what is wrong, before any tensor is made from it (a pickle that refers to anything a
    checkpoint of tensors does not need raises `pickle.UnpicklingError`)."""
    path = pathlib.Path(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(f"torch_load: {path} is not a zip-format PyTorch checkpoint (torch.save since 1.6); re-save "
                         "it with a current torch, or convert it to safetensors")  # fmt: skip
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise ValueError(f"torch_load: {path} is a damaged zip file: {e}") from None
    with archive:
        pkl = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pkl is None:
            raise ValueError(f"torch_load: {path} has no data.pkl: not a PyTorch checkpoint")
        root = pkl[: -len("data.pkl")]
        try:
            state = _TorchUnpickler(io.BytesIO(_read_record(archive, path, pkl, "the pickled state dict"))).load()
        except _Refused:
            raise
        except Exception as e:  # a truncated or mangled pickle, a call with the wrong arguments, a bad memo, ...
            raise ValueError(f"torch_load: {path}: {pkl} is not a valid pickle ({type(e).__name__}: {e})") from None
        if not isinstance(state, dict):
            held = "a single tensor" if isinstance(state, _TorchTensor) else f"a {type(state).__name__}"
            raise ValueError(f"torch_load: {path} holds {held}, not a dict of tensors (torch.save(model.state_dict(), "
                             "path) writes one)")  # fmt: skip
        byteorder = "little"
        if f"{root}byteorder" in set(archive.namelist()):  # absent before torch 1.12, which wrote little-endian only
            byteorder = _read_record(archive, path, f"{root}byteorder", "the byte order").decode(errors="replace")
        if byteorder not in ("little", "big"):
            raise ValueError(f"torch_load: {path} has byte order {byteorder!r}, not 'little' or 'big'")
        state = {str(k): v for k, v in state.items()}
        layouts = {key: _torch_layout(path, key, v) for key, v in _torch_leaves(state, "")}
        arrays = _torch_arrays(archive, path, root, layouts, byteorder == "big")
    made = {key: _torch_tensor(arr, layouts[key].storage.dtype, device) for key, arr in arrays.items()}
    return cast("dict[str, Any]", _torch_rebuilt(state, "", made))


def _torch_leaves(value: Any, name: str) -> Iterator[tuple[str, _TorchTensor]]:
    """The tensors in a checkpoint's (nested) dicts, lists and tuples, each with its path (`model.layers.0.weight`)."""
    if isinstance(value, _TorchTensor):
        yield name, value
    elif isinstance(value, (dict, list, tuple)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from _torch_leaves(item, f"{name}.{key}" if name else str(key))


def _torch_rebuilt(value: Any, name: str, made: dict[str, Tensor]) -> Any:
    """`value` with each tensor replaced by the Tensor made for its path (`_torch_leaves`'s order and names)."""
    if isinstance(value, _TorchTensor):
        return made[name]
    if isinstance(value, dict):
        return type(value)((key, _torch_rebuilt(item, f"{name}.{key}" if name else str(key), made))
                           for key, item in value.items())  # fmt: skip
    if isinstance(value, (list, tuple)):
        items = [_torch_rebuilt(item, f"{name}.{i}" if name else str(i), made) for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    return value


def _torch_arrays(archive: zipfile.ZipFile, path: pathlib.Path, root: str, layouts: dict[str, _TorchLayout],
                  big_endian: bool) -> dict[str, np.ndarray]:  # fmt: skip
    """Each tensor's elements, read out of its storage record (each record read once), with a progress line over
    the bytes read when they are `PROGRESS_MIN_BYTES` or more."""
    records = {f"{root}data/{layout.storage.key}" for layout in layouts.values() if 0 not in layout.size}
    sizes = {info.filename: info.file_size for info in archive.infolist() if info.filename in records}
    total = sum(sizes.values())  # (a record the archive lacks is reported when it is read)
    storages: dict[str, bytes] = {}
    arrays: dict[str, np.ndarray] = {}
    with progress(f"loading {path.name}", total=total, unit="B", show=total >= PROGRESS_MIN_BYTES) as bar:
        for key, layout in layouts.items():
            name = f"{root}data/{layout.storage.key}"
            if name not in storages and 0 not in layout.size:  # an empty tensor reads nothing
                storages[name] = _read_record(archive, path, name, f"the storage of tensor {key!r}")
                bar.update(len(storages[name]))
            arrays[key] = _torch_array(path, key, layout, storages.get(name, b""), big_endian)
    return arrays


def _torch_tensor(arr: np.ndarray, dtype: DType, device: str | None) -> Tensor:
    if dtype.fmt is None:  # bfloat16, fp8: held as unsigned bits (`to_np_dtype`); keep the bits, type them
        return Tensor(arr.view(to_np_dtype(dtype)), device=device).bitcast(dtype)
    return Tensor(arr, device=device)
