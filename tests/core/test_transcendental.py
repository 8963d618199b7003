"""The polynomial EXP2, LOG2 and SIN (`lazy.codegen.transcendental`) on the real CPU (C compiler) and LLVM devices,
measured in ulp over the whole range of float32 and float64: log-spaced magnitudes, denormals and their boundaries,
points next to multiples of pi/2, overflow and underflow thresholds, and the special values.

References: numpy's float64 results for float32 outputs; for float64 outputs the C library through Python's math
module (`lazy.ops.PYTHON_ALU`), within 1 ulp, where numpy's vectorized float64 functions may be a few ulp off."""

from __future__ import annotations

import functools
import math
import platform
import re
import subprocess

import numpy as np
import pytest

from lazy import Tensor
from lazy.codegen.program import get_program
from lazy.codegen.transcendental import TWO_OVER_PI, TWO_OVER_PI_BITS, lower_transcendental
from lazy.codegen.uops import UOps
from lazy.conformance.support import KernelBuilder, buffer_from, empty_buffer
from lazy.dtype import DType, dtypes, values_to_storage
from lazy.ops import PYTHON_ALU, Ops, truncate
from lazy.plugins import Device
from lazy_cpu.hostcpu import cpu_flags, describe

DEVICES = ["CPU", "LLVM"]
OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN)
MAX_ULP = 2.0


def run_ops(device: str, x: np.ndarray, dtype: DType, width: int = 1) -> dict[Ops, np.ndarray]:
    """EXP2, LOG2 and SIN of every element of `x` (numpy storage of `dtype`), as one kernel of `width`-lane vectors."""
    k = KernelBuilder(Device[device], f"test_transcendental_{dtype.name}_{width}")
    outs = [k.buffer(dtype, True) for _ in OPS]
    src = k.buffer(dtype)
    step = k.global_index(x.size // width)
    idx = k.alu(Ops.MUL, step, k.const(width)) if width > 1 else step
    value = k.load(src, idx, dtype.vec(width))
    for out, op in zip(outs, OPS):
        k.store(out, idx, lower_transcendental(k.b, op, value))
    bufs = [empty_buffer(device, x.size, dtype) for _ in OPS] + [buffer_from(device, x, dtype)]
    k.run(*bufs)
    return {op: buf.numpy() for op, buf in zip(OPS, bufs)}


def ulp_error(got: np.ndarray, want: np.ndarray, np_dtype: type[np.floating]) -> np.ndarray:
    """|got - want| in units of the gap between the two `np_dtype` values around `want` (0 where `want` rounds to a
    non-finite value and `got` is that value; inf where it is not)."""
    with np.errstate(over="ignore", invalid="ignore"):  # (references past the dtype's range round to inf)
        want_rounded: np.ndarray = want.astype(np_dtype)
        finite = np.isfinite(want_rounded)
        magnitude = np.abs(np.where(finite, want, 1.0))
        below = np.abs(np.where(finite, want_rounded, 1.0)).astype(np_dtype)
        below = np.where(below.astype(np.float64) > magnitude, np.nextafter(below, np_dtype(0)), below)
        gap = np.spacing(np.minimum(below, np.nextafter(np.finfo(np_dtype).max, np_dtype(0))))  # (max's is inf)
        error = np.abs(got.astype(np.float64) - want) / gap.astype(np.float64)
    same = (got == want_rounded) | (np.isnan(got) & np.isnan(want_rounded))
    return np.where(finite, np.nan_to_num(error, nan=np.inf), np.where(same, 0.0, np.inf))


def float_inputs(np_dtype: type[np.floating]) -> np.ndarray:
    """Both signs of magnitudes log-spaced over the whole range, the denormals' boundaries, [-160, 160] densely (exp2's
    domain), points next to multiples of pi/2 (near and huge), and the special values."""
    rng = np.random.default_rng(0)
    info = np.finfo(np_dtype)
    low, high = math.log2(float(info.smallest_subnormal)), math.log2(float(info.max))
    magnitudes: np.ndarray = np.exp2(rng.uniform(low, high, 6000)).astype(np_dtype)
    multiples = np.array(
        [k * math.pi / 2 for k in range(1, 400)] + [float(info.max) / 3, 1e22, 6381956970095103 * 2.0**797]
    )
    multiples = multiples[multiples < float(info.max)].astype(np_dtype)
    edges = [info.smallest_subnormal, info.smallest_normal, np.nextafter(info.smallest_normal, np_dtype(0)), info.max,
             0.5, 1.0, 2.0, 0.7071067811865476, 1.4142135623730951, 0.7853981633974483]  # fmt: skip
    bounds = [127, 128, 129, -126, -149, -150, -151, 1023, 1024, -1022, -1074, -1075]  # exp2's thresholds
    values = [magnitudes, np.nextafter(multiples, np_dtype(0)), multiples, np.nextafter(multiples, np_dtype(np.inf)),
              np.array(edges, np_dtype), np.array(bounds, np_dtype), rng.uniform(-1100, 1100, 3000).astype(np_dtype),
              rng.uniform(-160, 160, 3000).astype(np_dtype), rng.uniform(0.5, 2.0, 3000).astype(np_dtype)]  # fmt: skip
    signed = np.concatenate([np.concatenate(values), -np.concatenate(values)])
    special: np.ndarray = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np_dtype)
    x = np.concatenate([signed, special])
    return np.concatenate([x, np.zeros(-x.size % 16, np_dtype)])  # a multiple of every vector width


@functools.cache
def results(device: str, dtype: DType, width: int = 1) -> tuple[np.ndarray, dict[Ops, np.ndarray]]:
    """`float_inputs` and the three ops of them (shared by the tests: each kernel compiles once)."""
    x = float_inputs(np.float32 if dtype == dtypes.float32 else np.float64)
    return x, run_ops(device, x, dtype, width)


def reference(op: Ops, x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float32:
        with np.errstate(all="ignore"):
            return {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op](x.astype(np.float64))
    return np.array([PYTHON_ALU[op](float(v)) for v in x])


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("device", DEVICES)
def test_within_two_ulp_over_the_whole_range(device, dtype):
    np_dtype = np.float32 if dtype == dtypes.float32 else np.float64
    x, got = results(device, dtype)
    for op in OPS:
        error = ulp_error(got[op], reference(op, x), np_dtype)
        worst = int(np.argmax(error))
        assert error[worst] <= MAX_ULP, (
            f"{op} {dtype} on {device}: {error[worst]} ulp at {x[worst]!r}: {got[op][worst]!r}"
        )


@pytest.mark.parametrize("device", DEVICES)
def test_special_values(device):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-45, -1e-45, 128.0, -150.0, -149.0, 7.0], np.float32)
    got = run_ops(device, np.concatenate([x, np.zeros(4, np.float32)]), dtypes.float32)
    inf, nan = np.inf, np.nan
    want = {
        Ops.EXP2: [1, 1, inf, 0, nan, 0.5, 1, 1, inf, 0, 2.0**-149, 128],
        Ops.LOG2: [-inf, -inf, inf, nan, nan, nan, -149, nan, 7, nan, nan, math.log2(7)],
    }
    for op, values in want.items():
        np.testing.assert_array_equal(got[op][: x.size], np.array(values, np.float32), err_msg=f"{op} on {device}")
    sine = got[Ops.SIN][: x.size]
    np.testing.assert_array_equal(sine[:8], np.array([0.0, -0.0, nan, nan, nan, math.sin(-1.0), 1e-45, -1e-45],
                                                     np.float32))  # fmt: skip
    assert np.signbit(sine[1]) and not np.signbit(sine[0]), "sin keeps the sign of zero"


@pytest.mark.parametrize("device,width", [("CPU", 4), ("LLVM", 16)])
def test_vectors_give_the_scalar_results(device, width):
    """A kernel of float32 vectors (constants as vectors, selects and shifts per lane) computes what the scalar one
    does, bit for bit."""
    (_, scalar), (_, vector) = results(device, dtypes.float32), results(device, dtypes.float32, width)
    for op in OPS:
        np.testing.assert_array_equal(vector[op].view(np.uint32), scalar[op].view(np.uint32), err_msg=f"{op}")


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_narrow_floats_compute_in_float32(dtype):
    values = [truncate(v, dtype) for v in (0.0, -0.0, 1.0, -2.5, 3.0, 0.1, 60.0, -30.0, 1e-6, 100.0, np.inf, np.nan)]
    got = run_ops("LLVM", values_to_storage(values + [0.0] * 4, dtype), dtype)
    for op in OPS:
        want = [truncate(PYTHON_ALU[op](v), dtype) for v in values]
        np.testing.assert_array_equal(got[op][: len(values)].astype(np.float64), want, err_msg=f"{op} {dtype}")


def test_cpu_kernels_have_no_libm_call_and_python_keeps_native_math():
    """CPU and LLVM declare no native transcendental (a libm call is scalar); PYTHON declares all three."""
    data = np.linspace(-4, 4, 64, dtype=np.float32)
    for device in DEVICES:
        out = Tensor(data, device=device).exp().log().sin()
        spec = get_program(out.schedule()[-1].ast, Device[device].renderer)
        assert not any(name in spec.src for name in ("exp2", "log2", "sin")), spec.src
        np.testing.assert_allclose(out.numpy(), np.sin(np.log(np.exp(data))), rtol=1e-6, atol=1e-6)
    out = Tensor(data, device="PYTHON").exp()
    spec = get_program(out.schedule()[-1].ast, Device["PYTHON"].renderer)
    assert any(u.op is UOps.ALU and u.arg is Ops.EXP2 for u in spec.uops or [])


def test_cpu_kernels_with_transcendentals_are_vector_code(tmp_path):
    """The point of the polynomial code: a CPU kernel with exp, log or sin computes whole vectors of lanes, with no call
    per element. A libm call, or a select nest too deep for the compiler's if-conversion, would leave calls or scalar
    code; the assembly the CPU device's compiler makes of the kernel has neither."""
    if platform.machine().lower() not in ("x86_64", "amd64") or "fma" not in cpu_flags():
        pytest.skip(f"reads x86 assembly with FMA instructions; this machine is {platform.machine()} {describe()}")
    compiler = Device["CPU"].compiler
    x = Tensor(np.linspace(-4, 4, 1 << 12, dtype=np.float32), device="CPU")
    for name, out in (("exp", x.exp()), ("log", x.abs().log()), ("sin", x.sin())):
        src = get_program(out.schedule()[-1].ast, Device["CPU"].renderer).src
        out = tmp_path / f"{name}.s"
        cmd = [compiler.cc, *[f for f in compiler.flags if f != "-shared"], "-S", "-x", "c", "-", "-o", str(out)]
        subprocess.run(cmd, input=src, capture_output=True, text=True, check=True)
        asm = out.read_text()
        calls = [line.strip() for line in asm.splitlines() if line.strip().startswith("call")]
        assert not calls, f"{name}: {calls} in\n{src}"
        assert re.search(r"\bvfmadd\w*ps\b", asm), f"{name}: no vector FMA in\n{asm}"


def test_two_over_pi_digits():
    """The table is floor(2/pi * 2^bits), checked against pi from Machin's formula in integer arithmetic."""
    guard = TWO_OVER_PI_BITS + 64
    one = 1 << guard

    def arctan_inverse(n: int) -> int:  # arctan(1/n) * 2^guard
        total, term, k = 0, one // n, 0
        while term:
            total += term // (2 * k + 1) * (-1) ** k
            term //= n * n
            k += 1
        return total

    pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)  # pi * 2^guard, within a few units
    assert abs((2 << (TWO_OVER_PI_BITS + guard)) // pi - TWO_OVER_PI) <= 1


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("device", [*DEVICES, "PYTHON"])
def test_exp_reduces_its_own_argument(device, dtype):
    """`Tensor.exp` is EXP2(x * log2(e)); rounding the product first costs |x log2(e)| ulp(1) of relative accuracy
    (63 ulp near 88 in float32, 430 near 700 in float64), so the polynomial lowering reduces x by ln 2 itself
    (`transcendental.exp`): within about an ulp over the whole range, and the special values exactly. PYTHON has a
    native EXP2 (as GPUs do): it takes the same reduction, then its EXP2 of the remainder."""
    np_dtype = np.float32 if dtype == dtypes.float32 else np.float64
    top, bottom = (88.72, -103.9) if dtype == dtypes.float32 else (709.78, -745.1)
    rng = np.random.default_rng(4)
    edges = [0.0, -0.0, 1.0, top, top + 1, bottom, bottom - 1, 1e4, -1e4, np.inf, -np.inf, np.nan]
    tiny = -(10.0 ** rng.uniform(-30, 0, 500))
    x = np.concatenate([rng.uniform(bottom, top, 6000), rng.uniform(-10, 10, 3000), tiny, edges])
    x = x.astype(np_dtype)
    got = Tensor(x, device=device).exp().numpy().astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np_dtype).astype(np.float64)  # (inf and 0 as the dtype has them)
    normal = np.isfinite(want) & (want >= np.finfo(np_dtype).tiny)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(want[normal].astype(np_dtype)).astype(np.float64)
    worst = x[normal][np.argmax(ulps)]
    assert ulps.max() <= MAX_ULP, f"exp in {dtype.name} on {device}: {ulps.max():.1f} ulp at {worst}"
    special = ~normal
    np.testing.assert_allclose(got[special], want[special], rtol=1e-6, atol=np.finfo(np_dtype).tiny * 4)
