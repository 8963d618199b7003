"""Kernel ASTs are DAGs with heavy sharing (the RNG's rounds, `x + x` chains): they print as one numbered line per
distinct node, and their digest (the on-disk cache key) is computed once per node and is the same in every process.
A tree walk over such a DAG never finishes, so the tests that would hang without the fix carry a timeout."""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from lazy import Tensor, Variable
from lazy.dtype import dtypes
from lazy.ops import ConstBuffer, LazyOp, MemBuffer, Ops
from lazy.shape import ShapeTracker

D = "PYTHON"
ST = ShapeTracker.from_shape((4,))


def doubling_dag(depth: int) -> LazyOp:
    """SINK(STORE(x)) with x = x + x `depth` times: `depth + 3` distinct nodes, 2**depth paths from the root."""
    x = LazyOp(Ops.LOAD, (), MemBuffer(1, dtypes.float32, ST))
    for _ in range(depth):
        x = LazyOp(Ops.ADD, (x, x))
    return LazyOp(Ops.SINK, (LazyOp(Ops.STORE, (x,), MemBuffer(0, dtypes.float32, ST)),))


def kernel_asts(*ts: Tensor) -> list[LazyOp]:
    return [si.ast for si in ts[0].schedule(*ts[1:]) if si.ast.op is Ops.SINK]


def test_listing_names_each_node_once_and_refers_to_sources_by_number():
    a = LazyOp(Ops.LOAD, (), MemBuffer(1, dtypes.float32, ST))
    two = LazyOp(Ops.CONST, (), ConstBuffer(2.0, dtypes.float32, ST))
    prod = LazyOp(Ops.MUL, (a, two))
    ast = LazyOp(Ops.SINK, (LazyOp(Ops.STORE, (LazyOp(Ops.ADD, (prod, prod)),), MemBuffer(0, dtypes.float32, ST)),))
    assert repr(ast).splitlines() == [
        f"%0 = LOAD {a.arg!r}",
        f"%1 = CONST {two.arg!r}",
        "%2 = MUL %0 %1",
        "%3 = ADD %2 %2",
        f"%4 = STORE %3 {MemBuffer(0, dtypes.float32, ST)!r}",
        "%5 = SINK %4",
    ]


@pytest.mark.timeout(60)
def test_deep_shared_dag_prints_one_line_per_distinct_node():
    ast = doubling_dag(60)  # 2**60 paths: a tree walk never ends
    lines = repr(ast).splitlines()
    assert len(lines) == 63 == len(ast.toposort())
    assert lines[1] == "%1 = ADD %0 %0" and lines[60] == "%60 = ADD %59 %59"


@pytest.mark.timeout(60)
def test_rand_kernel_prints_one_line_per_distinct_node():
    for ast in kernel_asts(Tensor.rand(16, device=D)):
        lines = repr(ast).splitlines()
        assert len(lines) == len(ast.toposort())
        assert [line.split(" = ")[0] for line in lines] == [f"%{i}" for i in range(len(lines))]


def test_equal_structure_is_one_node_and_one_digest():
    assert doubling_dag(5) is doubling_dag(5)
    assert doubling_dag(5).digest == doubling_dag(5).digest and len(doubling_dag(5).digest) == 32


def test_digest_differs_for_different_structure():
    a = LazyOp(Ops.LOAD, (), MemBuffer(1, dtypes.float32, ST))
    b = LazyOp(Ops.LOAD, (), MemBuffer(2, dtypes.float32, ST))

    def const(val: object, dtype=dtypes.float32) -> LazyOp:
        return LazyOp(Ops.CONST, (), ConstBuffer(val, dtype, ST))

    variants = [
        LazyOp(Ops.ADD, (a, b)),
        LazyOp(Ops.ADD, (b, a)),  # source order
        LazyOp(Ops.MUL, (a, b)),  # op
        LazyOp(Ops.ADD, (a, a)),  # sharing
        LazyOp(Ops.LOAD, (), MemBuffer(1, dtypes.float32, ST.reshape((2, 2)))),  # view
        LazyOp(Ops.LOAD, (), MemBuffer(1, dtypes.float16, ST)),  # dtype
        const(0.0),
        const(-0.0),  # equal as floats, not as constants: 1 / -0.0 is -inf
        const(float("nan")),
        doubling_dag(3),
        doubling_dag(4),
    ]
    assert len({v.digest for v in variants}) == len(variants)
    assert len({id(v) for v in variants}) == len(variants)  # interning follows the digest: -0.0 is not 0.0
    assert const(float("nan")) is const(float("nan"))  # a NaN constant is still one node


@pytest.mark.timeout(60)
def test_pickle_is_linear_in_distinct_nodes_and_reinterns():
    ast = doubling_dag(60)
    data = pickle.dumps(ast)
    assert len(data) < 10_000  # one record per distinct node; a tree would be 2**60 of them
    assert pickle.loads(data) is ast


# builds kernels from plain ops (and one from the RNG, one symbolic, one padded) and prints their digests
DIGESTS_SCRIPT = """
import numpy as np
from lazy import Tensor, Variable
from lazy.ops import Ops
def digests(*ts):
    return [si.ast.digest.hex() for si in ts[0].schedule(*ts[1:]) if si.ast.op is Ops.SINK]
x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device="PYTHON").realize()
y = x
for _ in range(40):
    y = y + y
n = Variable("n", 1, 4).bind(3)
outs = [((x + 1) * x).sum(1), x.pad(((1, 1), (0, 0))).exp(), y, x.shrink(((0, n), (0, 6))) * 2,
        Tensor.rand(16, device="PYTHON")]
print(" ".join(d for t in outs for d in digests(t)))
"""


def run_digests(seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "LAZY_DEVICE": D}
    out = subprocess.run([sys.executable, "-c", DIGESTS_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_digest_is_the_same_in_every_process():
    first, second = run_digests("1"), run_digests("2")
    assert first == second and len(first) >= 5
    x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device=D).realize()
    (here,) = kernel_asts(((x + 1) * x).sum(1))
    assert here.digest.hex() == first[0]


DEBUG_SCRIPT = """
import numpy as np
from lazy import Tensor
Tensor.rand(16, device="PYTHON").numpy()
x = Tensor(np.ones(4, dtype=np.float32), device="PYTHON")
for _ in range(60):
    x = x + x
x.numpy()
"""


@pytest.mark.parametrize("level", [3, 5])  # 5 prints everything 4 does, and compiles one by one as 4 does
def test_debug_output_of_shared_dags_finishes(level):
    env = {**os.environ, "LAZY_DEBUG": str(level), "LAZY_DEVICE": D}
    out = subprocess.run([sys.executable, "-c", DEBUG_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "%60 = ADD %59 %59\n" in out.stdout  # the doubling chain, listed by distinct node


def test_symbolic_kernel_digest_ignores_the_bound_value():
    x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device=D).realize()
    asts = [kernel_asts(x.shrink(((0, Variable("n", 1, 4).bind(v)), (0, 6))) * 2)[0] for v in (2, 3)]
    assert asts[0] is asts[1]  # one kernel for every value of n
