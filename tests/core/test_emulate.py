"""GPU emulation on the PYTHON device: the tensor-core instructions it knows (hand-built one-warp WMMA kernels against
numpy, by the emulator's own lane layouts), GPU launch rules (warps, work-group and shared-memory limits), and
`LAZY_EMULATE` (another device's code generation target, found without probing or opening that device)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from lazy import Tensor, pydevice
from lazy.codegen.uops import UOp, UOpBuilder, UOps
from lazy.device import CompileError, DeviceError
from lazy.dtype import ALL_DTYPES, DType, dtypes, to_np_dtype
from lazy.engine.realize import method_cache
from lazy.helpers import Context
from lazy.hookspecs import PLUGIN_API_VERSION, CodegenTarget, DeviceSpec, hookimpl
from lazy.ops import Ops
from lazy.plugins import Device
from lazy.pydevice import (
    EXACT_MATH,
    PythonCompiler,
    PythonProgram,
    PythonRenderer,
    emulating,
    parse_kernel,
)
from lazy.renderer import Capabilities, FragmentLayout, Renderer, TensorCore
from lazy.wmma import KNOWN_TENSOR_CORES

I32, F16, BF16, F32 = dtypes.int32, dtypes.float16, dtypes.bfloat16, dtypes.float32

# the layouts a plugin declares (tc_contract): PTX mma.m16n8k16 and Apple's simdgroup_matrix 8x8
MMA = TensorCore(
    "mma.m16n8k16", (16, 8, 16), 32, F16, F32,
    a=FragmentLayout(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1", "e2")),
    b=FragmentLayout(("e0", "l0", "l1", "e1"), ("l2", "l3", "l4")),
    c=FragmentLayout(("l2", "l3", "l4", "e1"), ("e0", "l0", "l1")),
)  # fmt: skip
SIMD8 = FragmentLayout(("l1", "l2", "l4"), ("e0", "l0", "l3"))
SIMDGROUP = TensorCore("simdgroup_8x8x8", (8, 8, 8), 32, F32, F32, a=SIMD8, b=SIMD8, c=SIMD8)
DECLARED = {"mma.m16n8k16": MMA, "simdgroup_8x8x8": SIMDGROUP}


# ---------------------------------------------------------------------------------------------------------------------
# hand-built WMMA kernels: each lane gathers its fragments through index tables made from a DECLARED layout


def wmma_kernel(tc: TensorCore, divergent: bool = False) -> list[UOp]:
    """D = A @ B + C for one tile by one warp. Buffers: D, A, B, C (row-major), then for A, B and C/D an int32 table
    of each lane's fragment elements' flat positions (`tables`). `divergent`: only lanes 0-15 execute the WMMA."""
    b = UOpBuilder()
    dtype_of = (tc.dtype_out, tc.dtype_in, tc.dtype_in, tc.dtype_out, I32, I32, I32)
    bufs = [b.add(UOps.DEFINE_GLOBAL, d.ptr(), (), (i, f"data{i}", i == 0)) for i, d in enumerate(dtype_of)]
    lane = b.add(UOps.SPECIAL, I32, (), ("lidx0", tc.threads))
    frags, positions = [], []
    for operand, (layout, dtype) in enumerate(((tc.a, tc.dtype_in), (tc.b, tc.dtype_in), (tc.c, tc.dtype_out))):
        first = b.alu(Ops.MUL, lane, b.const(layout.elements, I32))
        where = [b.add(UOps.LOAD, I32, (bufs[4 + operand], b.alu(Ops.ADD, first, b.const(e, I32))))
                 for e in range(layout.elements)]  # fmt: skip
        values = tuple(b.add(UOps.LOAD, dtype, (bufs[1 + operand], idx)) for idx in where)
        frags.append(b.add(UOps.VECTORIZE, dtype.vec(layout.elements), values))
        positions = where
    cond = b.add(UOps.IF, None, (b.alu(Ops.CMPLT, lane, b.const(16, I32)),)) if divergent else None
    d = b.add(UOps.WMMA, tc.dtype_out.vec(tc.c.elements), tuple(frags), tc)
    for e, idx in enumerate(positions):
        b.add(UOps.STORE, None, (bufs[0], idx, b.add(UOps.GEP, tc.dtype_out, (d,), e)))
    if cond is not None:
        b.add(UOps.ENDIF, None, (cond,))
    return b.uops


def tables(tc: TensorCore) -> list[np.ndarray]:
    """Flat positions of each lane's fragment elements in A (M x K), B (K x N) and C/D (M x N), per the declaration."""
    m, n, k = tc.dims
    return [
        np.array([r * cols + c for lane in range(tc.threads) for e in range(layout.elements)
                  for r, c in [layout.coords(lane, e)]], np.int32)
        for layout, cols in ((tc.a, k), (tc.b, n), (tc.c, n))
    ]  # fmt: skip


def stored(values: np.ndarray, dtype: DType) -> np.ndarray:
    """`values` as the PYTHON device holds `dtype` in memory (bfloat16: the top 16 bits of a float32)."""
    if dtype == BF16:
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(to_np_dtype(dtype))


def loaded(raw: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == BF16:
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def run_wmma(tc: TensorCore, a: np.ndarray, b: np.ndarray, c: np.ndarray, **kernel: Any) -> np.ndarray:
    src = PythonRenderer().render("wmma", wmma_kernel(tc, **kernel))
    program = PythonProgram("wmma", PythonCompiler().compile(src))
    arrays = [stored(np.zeros_like(c), tc.dtype_out), stored(a, tc.dtype_in), stored(b, tc.dtype_in),
              stored(c, tc.dtype_out), *tables(tc)]  # fmt: skip
    bufs = [bytearray(x.tobytes()) for x in arrays]
    program(*bufs)
    return loaded(np.frombuffer(bufs[0], dtype=arrays[0].dtype), tc.dtype_out).reshape(c.shape)


def operands(tc: TensorCore, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Small integers: every product and sum is exact in each dtype, so only a misplaced element makes a difference."""
    m, n, k = tc.dims
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(-4, 5, size=shape).astype(np.float64) for shape in ((m, k), (k, n), (m, n)))  # type: ignore[return-value]


FORMS = [("mma.m16n8k16", F16, F32), ("mma.m16n8k16", BF16, F32), ("mma.m16n8k16", F16, F16),
         ("simdgroup_8x8x8", F32, F32), ("simdgroup_8x8x8", F16, F32), ("simdgroup_8x8x8", BF16, BF16)]  # fmt: skip


@pytest.mark.parametrize("name, dtype_in, dtype_out", FORMS)
def test_one_warp_wmma_matches_numpy(name: str, dtype_in: DType, dtype_out: DType) -> None:
    tc = dataclasses.replace(DECLARED[name], dtype_in=dtype_in, dtype_out=dtype_out)
    a, b, c = operands(tc)
    np.testing.assert_array_equal(run_wmma(tc, a, b, c), a @ b + c)


@pytest.mark.parametrize("name", sorted(KNOWN_TENSOR_CORES))
def test_known_layouts_cover_each_tile_once_and_agree_with_the_contract(name: str) -> None:
    known, declared = KNOWN_TENSOR_CORES[name], DECLARED[name]
    m, n, k = known.dims
    for where, layout, shape in ((known.a, declared.a, (m, k)), (known.b, declared.b, (k, n)),
                                 (known.c, declared.c, (m, n))):  # fmt: skip
        cells = [where(lane, e) for lane in range(known.threads) for e in range(layout.elements)]
        assert sorted(cells) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]
        assert cells == [layout.coords(lane, e) for lane in range(known.threads) for e in range(layout.elements)]


def test_a_wrong_layout_declaration_gives_wrong_numbers() -> None:
    # two lane bits of A's rows swapped: the kernel gathers A by this declaration, the emulator reads the fragments by
    # the PTX layout it knows, so the product is wrong (the conformance suite would fail such a plugin)
    wrong = dataclasses.replace(MMA, a=FragmentLayout(("l3", "l2", "l4", "e1"), ("e0", "l0", "l1", "e2")))
    a, b, c = operands(wrong)
    assert not np.array_equal(run_wmma(wrong, a, b, c), a @ b + c)


def test_wmma_sums_in_the_accumulator_dtype() -> None:
    # 2048 + 1 is not a half: each of the 16 steps rounds back to 2048 in a half accumulator, a float one counts them
    ones, big = np.ones((16, 16)), np.full((16, 8), 2048.0)
    assert (run_wmma(dataclasses.replace(MMA, dtype_out=F16), ones, ones[:, :8], big) == 2048).all()
    assert (run_wmma(MMA, ones, ones[:, :8], big) == 2064).all()


def test_divergent_wmma_is_refused() -> None:
    a, b, c = operands(MMA)
    with pytest.raises(DeviceError, match=r"lanes 0-15 reached it, lanes 16-31 ended; every lane of a warp"):
        run_wmma(MMA, a, b, c, divergent=True)


def test_wmma_needs_a_whole_warp() -> None:
    src = PythonRenderer().render("wmma", wmma_kernel(MMA))
    program = PythonProgram("wmma", PythonCompiler().compile(src))
    bufs = [bytearray(4096) for _ in range(7)]
    with pytest.raises(DeviceError, match="work group has 16 threads, so the last warp has 16"):
        program(*bufs, local_size=(16, 1, 1))


@pytest.mark.parametrize(
    "tc, message",
    [
        (dataclasses.replace(MMA, name="mma.m99n8k16"), "'mma.m99n8k16' is not an instruction the PYTHON device knows"),
        (dataclasses.replace(MMA, name="simdgroup_8x8x8"), r"simdgroup_8x8x8 multiplies \(8, 8, 8\)"),
        (dataclasses.replace(MMA, dtype_in=F32), "mma.m16n8k16 has no float -> float form"),
    ],
)
def test_wmma_the_emulator_cannot_run_as_declared_is_refused(tc: TensorCore, message: str) -> None:
    src = PythonRenderer().render("wmma", wmma_kernel(tc))
    with pytest.raises(CompileError, match=message):
        PythonProgram("wmma", PythonCompiler().compile(src))


def test_wmma_fragment_sizes_must_be_the_instructions() -> None:
    uops = wmma_kernel(MMA)
    wmma = next(u for u in uops if u.op is UOps.WMMA)
    wmma.src = (wmma.src[1], wmma.src[1], wmma.src[2])  # a B fragment (4 halves) where A's 8 belong
    src = PythonRenderer().render("wmma", uops)
    with pytest.raises(CompileError, match=r"takes fragments \(A, B, C\) of \(dtypes.half.vec\(8\)"):
        PythonProgram("wmma", PythonCompiler().compile(src))


def test_kernel_text_carries_the_wmma_arg() -> None:
    uops = wmma_kernel(SIMDGROUP)
    (wmma,) = [u for u in parse_kernel(PythonRenderer().render("wmma", uops)) if u.op is UOps.WMMA]
    assert wmma.arg == SIMDGROUP and wmma.dtype == F32.vec(2)


# ---------------------------------------------------------------------------------------------------------------------
# LAZY_EMULATE with a GPU plugin registered in the test: its target is found without probing or opening it

FAKE_CAPS = Capabilities(has_threads=True, has_local=True, local_max=(64, 64, 64), local_size_max=64, shared_max=4096,
                         vector_widths=(2,), dtypes=frozenset(ALL_DTYPES) - {dtypes.float64},
                         native_math=EXACT_MATH, tensor_cores=(MMA,))  # fmt: skip


class FakeRenderer(Renderer):
    device = "FAKEGPU"

    def __init__(self, caps: Capabilities):
        self.caps = caps

    def render(self, name: str, uops: list[UOp]) -> str:
        raise AssertionError("emulation generates code with the PYTHON renderer, never the emulated one")


class GpuPlugin:
    """FAKEGPU has a code generation target but no GPU (its probe and open are recorded, and must not be called);
    NOGEN has neither; BADGEN's codegen_targets raises."""

    def __init__(self, caps: Capabilities = FAKE_CAPS) -> None:
        self.caps = caps
        self.touched: list[str] = []

    def probe(self) -> tuple[bool, str]:
        self.touched.append("probe")
        return False, "no GPU here"

    def open(self, name: str) -> Any:
        self.touched.append("open")
        raise RuntimeError("no GPU here")

    @hookimpl
    def lazy_devices(self) -> list[DeviceSpec]:
        targets = lambda: [CodegenTarget("fake_sm", FakeRenderer(self.caps))]
        return [DeviceSpec(name="FAKEGPU", api_version=PLUGIN_API_VERSION, priority=1, probe=self.probe,
                           open=self.open, codegen_targets=targets),
                DeviceSpec(name="NOGEN", api_version=PLUGIN_API_VERSION, priority=1, probe=self.probe,
                           open=self.open),
                DeviceSpec(name="BADGEN", api_version=PLUGIN_API_VERSION, priority=1, probe=self.probe,
                           open=self.open, codegen_targets=self.missing_compiler)]  # fmt: skip

    def missing_compiler(self) -> list[CodegenTarget]:
        raise ModuleNotFoundError("install nvidia-cuda-nvrtc")


def register_gpu(caps: Capabilities = FAKE_CAPS) -> GpuPlugin:
    """Only PYTHON and the fake GPU plugin's devices exist (inside `clean_registry`)."""
    Device.reset(discover=False)
    plugin = GpuPlugin(caps)
    Device.register(pydevice, "python")
    Device.register(plugin, "fakegpu")
    assert sorted(Device.specs()) == ["BADGEN", "FAKEGPU", "NOGEN", "PYTHON"], Device.problems()
    return plugin


@pytest.fixture
def gpu_plugin(clean_registry: None) -> Iterator[GpuPlugin]:
    yield register_gpu()
    Device.reset(discover=False)  # closes the emulating PYTHON device before the setting goes back


def python_kernels(instance: str = "PYTHON") -> list[Any]:
    """The compiled kernels of one opened PYTHON instance."""
    return [runner for runner in method_cache.values() if runner.dev.device == instance]


def test_emulation_generates_for_the_target_and_runs_it(gpu_plugin: GpuPlugin) -> None:
    rng = np.random.default_rng(1)
    a, b, w = rng.standard_normal((4, 40)), rng.standard_normal((4, 40)), rng.standard_normal((40, 3))
    a, b, w = a.astype(np.float32), b.astype(np.float32), w.astype(np.float32)
    with Context(EMULATE="fakegpu"):
        ta, tb, tw = (Tensor(x, device="PYTHON") for x in (a, b, w))
        np.testing.assert_allclose((ta * 2 + tb).numpy(), a * 2 + b, rtol=1e-6)
        np.testing.assert_allclose(ta.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5)
        np.testing.assert_allclose(ta.max().numpy(), a.max())
        np.testing.assert_allclose((ta @ tw).numpy(), a @ w, rtol=1e-5, atol=1e-5)
        assert emulating() == "FAKEGPU fake_sm" and Device["PYTHON"].renderer.caps is FAKE_CAPS
        kernels = python_kernels()
        assert kernels and all(k.spec.src.splitlines()[1] == "# emulates: FAKEGPU fake_sm" for k in kernels)
        assert all(np.prod(k.spec.local_size or [1]) <= 64 for k in kernels)  # the target's limit, not PYTHON's 1024
        with pytest.raises(DeviceError, match="PYTHON does not support double"):
            (Tensor(a, device="PYTHON").cast(dtypes.float64) + 1).realize()  # FAKEGPU computes no float64
    assert gpu_plugin.touched == []  # neither probed nor opened


@pytest.mark.usefixtures("clean_registry")
@pytest.mark.parametrize(
    "declared_a, right", [(MMA.a, True), (FragmentLayout(("l3", "l2", "l4", "e1"), MMA.a.cols), False)]
)
def test_emulated_tensor_cores_run_by_the_emulators_layouts(declared_a: FragmentLayout, right: bool) -> None:
    # a half matmul on a target with a tensor core becomes WMMAs; the emulator runs them by the PTX layout it knows, so
    # the plugin's declaration (which core's code generator follows) is right exactly when the numbers are
    register_gpu(dataclasses.replace(FAKE_CAPS, tensor_cores=(dataclasses.replace(MMA, a=declared_a),)))
    rng = np.random.default_rng(3)
    x, y = rng.integers(-4, 5, size=(32, 32)).astype(np.float16), rng.integers(-4, 5, size=(32, 16)).astype(np.float16)
    with Context(EMULATE="FAKEGPU"):
        out = Tensor(x, device="PYTHON").matmul(Tensor(y, device="PYTHON"), dtype=dtypes.float32).numpy()
        assert any("\tWMMA\t" in k.spec.src for k in python_kernels())
    Device.reset(discover=False)
    assert np.array_equal(out, x.astype(np.float32) @ y.astype(np.float32)) == right


@pytest.mark.usefixtures("clean_registry")
def test_a_computed_half_operand_is_realized_half_for_the_tensor_core() -> None:
    # float32 -> half -> (dot's) float32: the half values are realized, not the float32 copy, so the matmul kernel
    # reads half and takes the tensor core; a plain PYTHON device realizes the float32 copy (test_tensor_cores.py)
    register_gpu(dataclasses.replace(FAKE_CAPS, tensor_cores=(MMA,)))
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
    with Context(EMULATE="FAKEGPU"):
        a, b = Tensor(x, device="PYTHON").cast(dtypes.float16), Tensor(y, device="PYTHON").cast(dtypes.float16)
        out = a.matmul(b, dtype=dtypes.float32)
        kernels = [si.ast for si in out.schedule() if si.ast.op is Ops.SINK]
        matmul = [ast for ast in kernels if any(n.op is Ops.SUM for n in ast.toposort())]
        assert len(matmul) == 1 and {n.arg.dtype for n in matmul[0].toposort() if n.op is Ops.LOAD} == {dtypes.float16}
        result = out.numpy()
        assert any("\tWMMA\t" in k.spec.src for k in python_kernels())
    Device.reset(discover=False)
    ref = x.astype(np.float16).astype(np.float32) @ y.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(result, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("clean_registry")
def test_loop_style_target_runs_its_core_split_range() -> None:
    # a CPU-like target: the kernel loops itself and takes [lo, hi) of its outer loop, which PYTHON runs in one call
    register_gpu(Capabilities(core_split=True, vector_widths=(4,), native_math=EXACT_MATH))
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    with Context(EMULATE="FAKEGPU"):
        np.testing.assert_array_equal((Tensor(x, device="PYTHON") * 2 + 1).numpy(), x * 2 + 1)
        assert [k.spec.core_split for k in python_kernels()] == [6]
    Device.reset(discover=False)


def test_emulation_of_what_cannot_be_emulated_says_what_to_set(gpu_plugin: GpuPlugin) -> None:
    for setting, message in [
        ("PYTHON", "the PYTHON device cannot emulate itself; set LAZY_EMULATE to a device with code generation "
                   r"targets \(BADGEN, FAKEGPU\) or unset it"),
        ("NOPE", "no installed plugin provides device NOPE"),
        ("NOGEN", r"NOGEN declares no code generation targets \(DeviceSpec.codegen_targets"),
        ("BADGEN", "BADGEN's codegen_targets\\(\\) raised ModuleNotFoundError: install nvidia-cuda-nvrtc"),
    ]:  # fmt: skip
        with Context(EMULATE=setting), pytest.raises(DeviceError, match=message):
            Device["PYTHON"]
    assert gpu_plugin.touched == []


def test_an_open_instance_keeps_its_target_until_it_is_closed(gpu_plugin: GpuPlugin) -> None:
    x = np.arange(6, dtype=np.float32)
    with Context(EMULATE="FAKEGPU"):
        np.testing.assert_array_equal((Tensor(x, device="PYTHON") + 1).numpy(), x + 1)
    # PYTHON still emulates FAKEGPU; PYTHON:1, opened now, emulates nothing: both run, each its own kernels
    np.testing.assert_array_equal((Tensor(x, device="PYTHON") * 3).numpy(), x * 3)
    np.testing.assert_array_equal((Tensor(x, device="PYTHON:1") * 3).numpy(), x * 3)
    assert (emulating(), emulating("PYTHON:1")) == ("FAKEGPU fake_sm", None)
    assert {k.spec.src.splitlines()[1] for k in python_kernels()} == {"# emulates: FAKEGPU fake_sm"}
    plain = python_kernels("PYTHON:1")
    assert plain and not any(k.spec.src.splitlines()[1].startswith("# emulates") for k in plain)
    Device.reset(discover=False)  # closes both: the next use opens PYTHON under the setting of the time
    Device.register(pydevice, "python")
    np.testing.assert_array_equal((Tensor(x, device="PYTHON") * 3).numpy(), x * 3)
    assert emulating() is None


def test_kernel_made_for_another_target_is_refused(gpu_plugin: GpuPlugin) -> None:
    src = PythonRenderer().render("wmma", wmma_kernel(MMA))  # for the plain PYTHON device
    with Context(EMULATE="FAKEGPU"):
        dev = Device["PYTHON"]
        with pytest.raises(DeviceError, match="generated for PYTHON and cannot run on PYTHON emulating FAKEGPU"):
            dev.runtime("wmma", dev.compiler.compile(src), None)  # type: ignore[arg-type]


def local_memory_kernel(elements: int) -> list[UOp]:
    """Each thread writes its id into local memory of `elements` floats and reads it back."""
    b = UOpBuilder()
    out = b.add(UOps.DEFINE_GLOBAL, F32.ptr(), (), (0, "data0", True))
    local = b.add(UOps.DEFINE_LOCAL, F32.ptr(), (), ("temp", elements))
    lid = b.add(UOps.SPECIAL, I32, (), ("lidx0", 32))
    b.add(UOps.STORE, None, (local, lid, b.add(UOps.CAST, F32, (lid,))))
    b.add(UOps.BARRIER)
    b.add(UOps.STORE, None, (out, lid, b.add(UOps.LOAD, F32, (local, lid))))
    return b.uops


def test_launch_limits_are_the_targets(gpu_plugin: GpuPlugin) -> None:
    with Context(EMULATE="FAKEGPU"):
        dev = Device["PYTHON"]
        run = lambda elements, **launch: dev.runtime("k", dev.compiler.compile(
            dev.renderer.render("k", local_memory_kernel(elements))), None)(bytearray(256), **launch)  # type: ignore[arg-type]  # fmt: skip
        run(1024)  # 4096 bytes: just fits
        with pytest.raises(
            DeviceError,
            match=r"uses 4100 bytes of work group memory; this device allows 4096 \(Capabilities.shared_max\)",
        ):
            run(1025)
        with pytest.raises(
            DeviceError,
            match=r"work groups of 128 threads in dimension 0; this device allows 64 \(Capabilities.local_max\[0\]\)",
        ):
            run(8, local_size=(128, 1, 1))


@pytest.mark.usefixtures("clean_registry")
def test_grids_over_the_targets_limits_merge_into_x() -> None:
    # CUDA launches at most 65535 blocks along y and z: a kernel with more output rows launches them along x (merged
    # with the axis there), not as a loop in every item (before: a loop, which ran a GPU's work on a few threads)
    register_gpu(dataclasses.replace(FAKE_CAPS, global_max=(1 << 31, 3, 3)))
    x = np.arange(5 * 7 * 4, dtype=np.float32).reshape(5, 7, 4)
    with Context(EMULATE="FAKEGPU", NOOPT=1):
        out = (Tensor(x, device="PYTHON").permute(1, 0, 2) * 2).numpy()  # (7, 5, 4): 7 and 5 are over the limit of 3
        (kernel,) = python_kernels()
        assert "\tRANGE\t" not in kernel.spec.src
        assert kernel.spec.global_size is not None and max(kernel.spec.global_size[1:]) <= 3
    Device.reset(discover=False)
    np.testing.assert_array_equal(out, x.transpose(1, 0, 2) * 2)


# ---------------------------------------------------------------------------------------------------------------------
# the real GPU plugins, where installed


@pytest.fixture
def real_registry() -> Iterator[None]:
    Device.reset()
    yield
    Device.reset()  # the emulating PYTHON device closes before the setting goes back


@pytest.mark.parametrize("device", ["CUDA", "METAL"])
def test_emulated_gpu_plugin_matches_numpy(device: str, real_registry: None) -> None:
    if device not in Device.specs():
        pytest.skip(f"the {device} plugin is not installed (lazy-{device.lower()}); scripts/setup.sh installs it")
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((5, 24)).astype(np.float32), rng.standard_normal((24, 6)).astype(np.float32)
    with Context(EMULATE=device):
        ta, tw = Tensor(a, device="PYTHON"), Tensor(w, device="PYTHON")
        np.testing.assert_allclose((ta * 2 - 1).exp2().numpy(), np.exp2(a * 2 - 1), rtol=1e-5)
        np.testing.assert_allclose(ta.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose((ta @ tw).numpy(), a @ w, rtol=1e-5, atol=1e-5)
        # a half matmul runs on the target's tensor core, by the emulator's own layout of its instruction
        x, y = (
            rng.integers(-4, 5, size=(32, 16)).astype(np.float16),
            rng.integers(-4, 5, size=(16, 8)).astype(np.float16),
        )
        out = Tensor(x, device="PYTHON").matmul(Tensor(y, device="PYTHON"), dtype=dtypes.float32).numpy()
        np.testing.assert_array_equal(out, x.astype(np.float32) @ y.astype(np.float32))
        assert any("\tWMMA\t" in k.spec.src for k in python_kernels())
        assert (emulating() or "").startswith(device)
        assert not Device.opened(device)
