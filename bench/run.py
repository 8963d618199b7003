"""The benchmark command: lazy beside numpy and PyTorch (and tinygrad when installed), all measured in one run.

    .venv/bin/python bench/run.py [--devices CPU,LLVM] [--rows matmul,conv2d] [--quick] [--budget 3]
                                  [--out docs/benchmarks.md]

Prints a Markdown table (each row's figure in its unit, and lazy / numpy, lazy / PyTorch ratios) with the machine it
ran on, and rewrites the section between the bench markers of --out. Timing lives here, never in tests: how a row's
columns are timed against each other is `bench/measure.py`, what each library runs for a row is below. The cold-start
rows run each repetition in a fresh interpreter (`bench/fresh.py`: this script again, as a child), which reports its
own times. Issue 14's figures come from their own scripts in fresh processes and are quoted below the table:
`allreduce` (`bench/allreduce.py`, in every run) and `dp_mpi` (`bench/dp_mpi.py`, a minute or two: in full runs, or
when --rows names it).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import fresh  # bench/fresh.py, measure.py and report.py: this script's directory is on sys.path when it runs
import numpy as np
import report
from measure import (
    GBS,
    GFLOPS,
    MS,
    MS_PER_STEP,
    SECONDS,
    US_PER_OP,
    US_PER_STEP,
    Budget,
    Cell,
    Elapsed,
    Figure,
    NotMeasured,  # fmt: skip
    Prepare,
    Timed,
    Unit,
    figure_of,
    fmt_number,
    measure_cells,
    ratio,
    set_up,
)

RNG = np.random.default_rng(0)
TINY_COUNT = 200  # tiny ops per repetition of the tiny-op row (a single one is below the timer's resolution)
MLP_STEPS = 20  # jitted MLP steps per repetition
JIT_OPS = 20  # kernels in the jitted chain of the jit-replay rows
JIT_CALLS = 50  # replays of the chain per repetition
# the most timed repetitions of one figure (within the time budget). This machine class is noisy (a 16M sum's time
# varied 2.6-4.2 ms between repetitions): the best of 20 moved a ratio by 0.1-0.2 from run to run, for every column
MAX_REPS = 100


def rand(*shape: int) -> np.ndarray:
    return RNG.random(shape, dtype=np.float32)


def labels(batch: int) -> np.ndarray:
    return RNG.integers(0, 10, batch).astype(np.int32)


# -- tinygrad-style tensor libraries: lazy, and tinygrad for its column ------------------------------------------------


@dataclass(frozen=True)
class TensorLib:
    """A tinygrad-style library on one device (lazy itself, or tinygrad for its column): the rows' tensor code is
    written once against this and runs on either."""

    name: str
    device: str
    tensor_type: Any
    nn: Any  # Conv2d, Linear
    optim: Any  # Adam, SGD
    jit: Callable[[Callable[..., Any]], Callable[..., Any]]
    get_parameters: Callable[[Any], list[Any]]
    train: Callable[[], AbstractContextManager[Any]]
    synchronize: Callable[[], None]
    is_realized: Callable[[Any], bool]
    kernel_count: Callable[[], int]  # kernels launched so far in this process
    # whether a realized tensor keeps the graph that made it, so `backward` can run after an untimed forward
    keeps_graph: bool = True

    def tensor(self, array: np.ndarray) -> Any:
        return self.tensor_type(array, device=self.device).realize()

    def realize(self, *results: Any) -> None:
        """Realize results built anew: a result that is already realized would time a cached value, not a kernel."""
        if any(self.is_realized(t) for t in results):
            raise RuntimeError(f"{self.name}: a timed result was already realized: the benchmark would time no work")
        results[0].realize(*results[1:])

    def compute(self, *results: Any) -> None:
        self.realize(*results)
        self.synchronize()

    def place(self, model: Any) -> list[Any]:
        """Move every parameter of `model` to this device, realized, and return them."""
        params = self.get_parameters(model)
        for p in params:
            p.to_(self.device).realize()
        return params


def lazy_lib(device: str) -> TensorLib:
    import lazy
    from lazy import nn
    from lazy.helpers import GlobalCounters
    from lazy.nn import optim
    from lazy.nn.state import get_parameters

    return TensorLib("lazy", device, lazy.Tensor, nn, optim, lazy.TinyJit, get_parameters, lazy.Tensor.train,
                     lazy.Device[device].synchronize, lambda t: t.lazydata.is_realized(),
                     lambda: GlobalCounters.kernel_count)  # fmt: skip


def tinygrad_lib(device: str) -> TensorLib | None:
    """tinygrad (`pip install tinygrad`) on its device of the same name, or None when it is not installed or cannot
    run a kernel there (its CPU backend needs clang)."""
    try:
        import tinygrad
        from tinygrad import nn
        from tinygrad.helpers import Context, GlobalCounters
        from tinygrad.nn import optim
        from tinygrad.nn.state import get_parameters

        (tinygrad.Tensor([1.0], device=device) + 1).realize()
    except Exception as e:  # not installed, no such backend, or one that does not work on this machine
        if not isinstance(e, ImportError):
            print(f"tinygrad on {device}: {type(e).__name__}: {e}; its column says n/a", file=sys.stderr)
        return None
    return TensorLib("tinygrad", device, tinygrad.Tensor, nn, optim, tinygrad.TinyJit, get_parameters,
                     lambda: Context(TRAINING=1), tinygrad.Device[device].synchronize,
                     lambda t: t.uop.is_realized, lambda: GlobalCounters.kernel_count, keeps_graph=False)  # fmt: skip


def load_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    return torch


# -- the rows' workloads: each a Prepare per library -------------------------------------------------------------------


@dataclass(frozen=True)
class ConvShape:
    """A 3x3, padding-1 convolution (so the output has the input's height and width)."""

    batch: int
    channels_in: int
    channels_out: int
    size: int  # height = width

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.channels_out * self.size**2 * self.channels_in * 9

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        x = rand(self.batch, self.channels_in, self.size, self.size)
        return x, rand(self.channels_out, self.channels_in, 3, 3) - 0.5


def same(prepare_run: Timed) -> Prepare:
    """A repetition that needs no untimed set-up."""
    return lambda: prepare_run


def lib_tiny(lib: TensorLib, sync_each: bool = False) -> Prepare:
    """TINY_COUNT eager `(x+1).realize()` on 16 elements; `sync_each`: waiting for the device after each one."""
    x = lib.tensor(np.arange(16, dtype=np.float32))

    def run() -> None:
        for _ in range(TINY_COUNT):
            lib.realize(x + 1)
            if sync_each:
                lib.synchronize()
        lib.synchronize()

    return same(run)


def lib_jit_chain(lib: TensorLib, sync_each: bool = False) -> Prepare:
    """JIT_CALLS replays of a jitted chain of JIT_OPS tiny adds, each its own kernel (`contiguous` stops the
    elementwise fusion that would make the chain one kernel); `sync_each`: waiting for the device after each replay."""
    x = lib.tensor(np.arange(16, dtype=np.float32))

    @lib.jit
    def chain(y: Any) -> Any:
        for i in range(JIT_OPS):
            y = (y + (i + 1)).contiguous()  # + 0 would fold away
        return y

    for _ in range(2):  # the first call runs eagerly, the second captures
        chain(x)
    before = lib.kernel_count()
    chain(x)
    if (ran := lib.kernel_count() - before) != JIT_OPS:
        raise RuntimeError(f"{lib.name}: a replay of the {JIT_OPS}-op chain ran {ran} kernels, not one per op: the "
                           "figure per op would be wrong")  # fmt: skip

    def run() -> None:
        for _ in range(JIT_CALLS):
            chain(x)
            if sync_each:
                lib.synchronize()
        lib.synchronize()

    return same(run)


def lib_elementwise(lib: TensorLib, n: int) -> Prepare:
    a, b, c = (lib.tensor(rand(n)) for _ in range(3))
    return same(lambda: lib.compute((a + b) * c))


def lib_exp_chain(lib: TensorLib, n: int) -> Prepare:
    a, b, c = (lib.tensor(rand(n) - 0.5) for _ in range(3))
    return same(lambda: lib.compute(((a * b + c).relu() * 0.5).exp()))


def lib_sum(lib: TensorLib, n: int) -> Prepare:
    a = lib.tensor(rand(n))
    return same(lambda: lib.compute(a.sum()))


def lib_softmax(lib: TensorLib, n: int) -> Prepare:
    x = lib.tensor(rand(n, n))
    return same(lambda: lib.compute(x.softmax(-1)))


def lib_matmul(lib: TensorLib, n: int) -> Prepare:
    a, b = lib.tensor(rand(n, n)), lib.tensor(rand(n, n))
    return same(lambda: lib.compute(a @ b))


def lib_conv(lib: TensorLib, shape: ConvShape) -> Prepare:
    x, w = (lib.tensor(a) for a in shape.arrays())
    return same(lambda: lib.compute(x.conv2d(w, padding=1)))


def lib_conv_backward(lib: TensorLib, shape: ConvShape) -> Prepare:
    """Input and weight gradients of the convolution, given the output's gradient; the forward runs untimed."""
    if not lib.keeps_graph:
        raise NotMeasured(f"n/a ({lib.name} drops the graph on realize: the forward would be timed too)")
    x_np, w_np = shape.arrays()
    x, w, grad_out = (
        lib.tensor(x_np),
        lib.tensor(w_np),
        lib.tensor(rand(*x_np.shape[:1], *w_np.shape[:1], *x_np.shape[2:])),
    )

    def prepare() -> Timed:
        xg, wg = x.detach(), w.detach()
        xg.requires_grad = wg.requires_grad = True
        out = xg.conv2d(wg, padding=1).realize()

        def run() -> None:
            out.backward(grad_out)
            lib.compute(xg.grad, wg.grad)

        return run

    return prepare


class MnistCNN:
    """tinygrad's beautiful_mnist layer stack without its batchnorms, in any tinygrad-style library's `nn`."""

    def __init__(self, nn: Any) -> None:
        self.convs = [nn.Conv2d(1, 32, 5), nn.Conv2d(32, 32, 5), nn.Conv2d(32, 64, 3), nn.Conv2d(64, 64, 3)]
        self.fc = nn.Linear(576, 10)

    def __call__(self, x: Any) -> Any:  # (B, 1, 28, 28) -> (B, 10)
        x = self.convs[1](self.convs[0](x).relu()).relu().max_pool2d(2)  # (B, 32, 10, 10)
        x = self.convs[3](self.convs[2](x).relu()).relu().max_pool2d(2)  # (B, 64, 3, 3)
        return self.fc(x.flatten(1))


class MLP:
    def __init__(self, nn: Any) -> None:
        self.layers = [nn.Linear(64, 64), nn.Linear(64, 10)]

    def __call__(self, x: Any) -> Any:  # (B, 64) -> (B, 10)
        return self.layers[1](self.layers[0](x).relu())


def lib_step(lib: TensorLib, model: Any, optimizer: Any, x: np.ndarray) -> Callable[[], Any]:
    """One jitted training step (forward, cross-entropy, backward, optimizer step) on the batch `x`, as users train:
    the first call runs it eagerly, the second captures it. Each call returns the loss, realized."""
    opt = optimizer(lib.place(model))

    @lib.jit
    def step(inputs: Any, targets: Any) -> Any:
        with lib.train():
            opt.zero_grad()
            loss = model(inputs).sparse_categorical_crossentropy(targets)
            loss.backward()
            opt.step()
            return loss.realize()

    inputs, targets = lib.tensor(x), lib.tensor(labels(len(x)))
    return lambda: step(inputs, targets)


def lib_train_steps(lib: TensorLib, step: Callable[[], Any], steps: int) -> Prepare:
    """`steps` calls of a jitted training step; the warm-up calls run it eagerly, then capture it."""

    def run() -> None:
        for _ in range(steps):
            step()
        lib.synchronize()

    return same(run)


def lib_cnn_step(lib: TensorLib, batch: int) -> Callable[[], Any]:
    return lib_step(lib, MnistCNN(lib.nn), lambda p: lib.optim.Adam(p, lr=1e-3), rand(batch, 1, 28, 28))


def lib_cnn(lib: TensorLib, batch: int) -> Prepare:
    return lib_train_steps(lib, lib_cnn_step(lib, batch), 1)


def lib_mlp(lib: TensorLib) -> Prepare:
    step = lib_step(lib, MLP(lib.nn), lambda p: lib.optim.SGD(p, lr=0.01), rand(64, 64))
    return lib_train_steps(lib, step, MLP_STEPS)


def lib_embedding(lib: TensorLib, vocab: int, width: int, tokens: int) -> Prepare:
    """A token embedding's lookup and the gradient of its table (a fresh gradient each repetition)."""
    emb = lib.nn.Embedding(vocab, width)
    lib.place(emb)
    idx, g = lib.tensor(labels_in(vocab, tokens)), lib.tensor(rand(tokens, width))

    def run() -> None:
        emb.weight.grad = None
        (emb(idx) * g).sum().backward()
        lib.compute(emb.weight.grad)

    return same(run)


def lib_sort(lib: TensorLib, n: int) -> Prepare:
    a = lib.tensor(rand(n))
    return same(lambda: lib.compute(*a.sort()))


def lib_topk(lib: TensorLib, n: int, k: int) -> Prepare:
    a = lib.tensor(rand(n))
    return same(lambda: lib.compute(*a.topk(k)))


def labels_in(count: int, n: int) -> np.ndarray:
    return RNG.integers(0, count, n).astype(np.int32)


def numpy_tiny() -> Prepare:
    x = np.arange(16, dtype=np.float32)
    return same(lambda: [x + 1 for _ in range(TINY_COUNT)])


def eager_chain(x: Any, sync: Callable[[], None] | None = None) -> Prepare:
    """The jit rows' chain of adds on an array or tensor (numpy, PyTorch), eagerly; `sync` waits for a GPU at the
    end."""

    def run() -> None:
        for _ in range(JIT_CALLS):
            y = x
            for i in range(JIT_OPS):
                y = y + (i + 1)
        if sync is not None:
            sync()

    return same(run)


def numpy_chain() -> Prepare:
    return eager_chain(np.arange(16, dtype=np.float32))


def numpy_elementwise(n: int) -> Prepare:
    a, b, c = rand(n), rand(n), rand(n)
    return same(lambda: (a + b) * c)


def numpy_exp_chain(n: int) -> Prepare:
    a, b, c = rand(n) - 0.5, rand(n) - 0.5, rand(n) - 0.5
    return same(lambda: np.exp(np.maximum(a * b + c, 0) * 0.5))


def numpy_sum(n: int) -> Prepare:
    a = rand(n)
    return same(lambda: a.sum())


def numpy_softmax(n: int) -> Prepare:
    x = rand(n, n)

    def run() -> np.ndarray:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return same(run)


def numpy_matmul(n: int) -> Prepare:
    a, b = rand(n, n), rand(n, n)
    return same(lambda: a @ b)


def numpy_conv(shape: ConvShape) -> Prepare:
    """im2col (a copy of every 3x3 window) and one BLAS matmul per image: the usual way to convolve in numpy."""
    x, w = shape.arrays()
    weight = w.reshape(shape.channels_out, -1)  # (C_out, C_in*9)
    batch, size = shape.batch, shape.size

    def run() -> np.ndarray:
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (B, C_in, H, W, 3, 3)
        cols = windows.transpose(0, 1, 4, 5, 2, 3).reshape(batch, -1, size * size)  # (B, C_in*9, H*W)
        return np.matmul(weight, cols).reshape(batch, -1, size, size)  # (B, C_out, H, W)

    return same(run)


# numpy and PyTorch run on the CPU before they return: their "sync" rows are the same code as the rows without
def numpy_sort(n: int) -> Prepare:
    a = rand(n)
    return same(lambda: (np.sort(a, kind="stable"), np.argsort(a, kind="stable")))


def numpy_topk(n: int, k: int) -> Prepare:
    a = rand(n)

    def run() -> tuple[np.ndarray, np.ndarray]:  # numpy has no topk: a partition, then the k in order
        part = np.argpartition(a, n - k)[n - k :]
        order = part[np.argsort(-a[part], kind="stable")]
        return a[order], order

    return same(run)


NUMPY_ROWS: dict[str, Callable[..., Prepare]] = {
    "tiny": numpy_tiny, "tiny_sync": numpy_tiny, "jit": numpy_chain, "jit_sync": numpy_chain,
    "elementwise": numpy_elementwise, "exp": numpy_exp_chain, "sum": numpy_sum, "softmax": numpy_softmax,
    "matmul": numpy_matmul, "conv2d": numpy_conv, "sort": numpy_sort, "topk": numpy_topk,
}  # fmt: skip


def torch_step(torch: Any, model: Any, optimizer: Any, x: np.ndarray, device: str = "cpu") -> Callable[[], Any]:
    """One eager training step of `model` on the batch `x` on `device`; each call returns the loss."""
    model.to(device)
    opt, inputs = optimizer(model.parameters()), torch.from_numpy(x).to(device)
    targets = torch.from_numpy(labels(len(x)).astype(np.int64)).to(device)

    def step() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        opt.step()
        return loss

    return step


def torch_cnn_step(torch: Any, batch: int, device: str = "cpu") -> Callable[[], Any]:
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(576, 10))  # fmt: skip
    return torch_step(torch, model, lambda p: torch.optim.Adam(p, lr=1e-3), rand(batch, 1, 28, 28), device)


# -- cold start: rows measured in a fresh interpreter ------------------------------------------------------------------


def first_cnn_step(library: str, device: str, batch: int) -> dict[str, float]:
    """Run in a fresh process: build the CNN, its optimizer and a batch, then time the first step (for lazy and
    tinygrad the jit's first, eager call) from the call to its loss as a Python float. `done_at` is the wall clock
    then: the parent subtracts the time it started the process."""
    if library == "PyTorch":
        step = torch_cnn_step(load_torch(), batch)
    else:
        lib = lazy_lib(device) if library == "lazy" else tinygrad_lib(device)
        if lib is None:
            raise RuntimeError(f"{library} cannot run on {device}")
        step = lib_cnn_step(lib, batch)
    start = time.perf_counter()
    loss = float(step().item())
    first_step = time.perf_counter() - start
    return {"first_step": first_step, "done_at": time.time(), "loss": loss}


FRESH_PROCESS_RUNS: dict[str, Callable[..., dict[str, float]]] = {"first_cnn_step": first_cnn_step}


@dataclass(frozen=True)
class ColdStart:
    """What a cold-start row reports of the first CNN step in a fresh process: `figure` is "first_step" (from the
    step call to its loss) or "to_result" (from starting the process, imports included, to the loss); the compile
    cache is empty, or (`warm`) filled by an earlier process."""

    figure: str
    warm: bool
    title: str


FRESH_CNN_ROWS = {
    "cnn_cold": ColdStart("first_step", False, "empty compile cache: first step call to its loss"),
    "cnn_warm": ColdStart("to_result", True, "warm compile cache: process start (imports too) to first step's loss"),
    "cnn_warm_step": ColdStart("first_step", True, "warm compile cache: first step call to its loss"),
}


@functools.cache
def warm_compile_cache(library: str, device: str, batch: int) -> tempfile.TemporaryDirectory[str]:
    """A compile cache filled by one untimed first step in a fresh process, shared by the warm rows until exit."""
    kwargs = {"library": library, "device": device, "batch": batch}
    return fresh.filled_cache(__file__, "first_cnn_step", kwargs, device)


def fresh_cnn_step(library: str, device: str, batch: int, how: ColdStart) -> Prepare:
    """Each repetition is one fresh process running the first CNN step; it reports its own time (`Elapsed`)."""
    kwargs = {"library": library, "device": device, "batch": batch}
    warm = warm_compile_cache(library, device, batch) if how.warm else None  # filled here, untimed

    def run() -> Elapsed:
        if warm is not None:
            return Elapsed(fresh.in_fresh_process(__file__, "first_cnn_step", kwargs, device, warm.name)[how.figure])
        with tempfile.TemporaryDirectory(prefix="lazy-bench-cold-") as empty:
            return Elapsed(fresh.in_fresh_process(__file__, "first_cnn_step", kwargs, device, empty)[how.figure])

    return same(run)


def lib_fresh_cnn_step(lib: TensorLib, batch: int, how: ColdStart) -> Prepare:
    return fresh_cnn_step(lib.name, lib.device, batch, how)


def torch_rows(torch: Any, device: str = "cpu") -> dict[str, Callable[..., Prepare]]:
    """PyTorch's version of each row, by `Workload.key` (all cores on the CPU, out of place like the others). On a GPU
    (`device` "cuda") each repetition waits for the device, as lazy's do."""
    F, nn = torch.nn.functional, torch.nn  # noqa: N806 (PyTorch's spelling)
    on_gpu = device != "cpu"

    def t(array: np.ndarray) -> Any:
        return torch.from_numpy(array).to(device)

    def timed(run: Callable[[], Any]) -> Prepare:
        if not on_gpu:
            return same(run)
        return same(lambda: (run(), torch.cuda.synchronize()))

    def tiny() -> Prepare:
        x = torch.arange(16, dtype=torch.float32, device=device)
        return timed(lambda: [x + 1 for _ in range(TINY_COUNT)])

    def chain() -> Prepare:  # eager: the jit rows' ops one by one, as PyTorch runs them without torch.compile
        return eager_chain(torch.arange(16, dtype=torch.float32, device=device), torch.cuda.synchronize if on_gpu
                           else None)  # fmt: skip

    def elementwise(n: int) -> Prepare:
        a, b, c = (t(rand(n)) for _ in range(3))
        return timed(lambda: (a + b) * c)

    def exp_chain(n: int) -> Prepare:
        a, b, c = (t(rand(n) - 0.5) for _ in range(3))
        return timed(lambda: torch.exp(torch.relu(a * b + c) * 0.5))

    def total(n: int) -> Prepare:
        a = t(rand(n))
        return timed(lambda: a.sum())

    def embedding(vocab: int, width: int, tokens: int) -> Prepare:
        emb = nn.Embedding(vocab, width).to(device)
        idx, g = t(labels_in(vocab, tokens).astype(np.int64)), t(rand(tokens, width))

        def run() -> None:
            emb.weight.grad = None
            (emb(idx) * g).sum().backward()

        return timed(run)

    def sort(n: int) -> Prepare:
        a = t(rand(n))
        return timed(lambda: torch.sort(a, stable=True))

    def topk(n: int, k: int) -> Prepare:
        a = t(rand(n))
        return timed(lambda: torch.topk(a, k))

    def softmax(n: int) -> Prepare:
        x = t(rand(n, n))
        return timed(lambda: torch.softmax(x, dim=-1))

    def matmul(n: int) -> Prepare:
        a, b = t(rand(n, n)), t(rand(n, n))
        return timed(lambda: a @ b)

    def conv(shape: ConvShape) -> Prepare:
        x, w = (t(a) for a in shape.arrays())
        return timed(lambda: F.conv2d(x, w, padding=1))

    def conv_backward(shape: ConvShape) -> Prepare:
        x_np, w_np = shape.arrays()
        grad_out = t(rand(x_np.shape[0], w_np.shape[0], *x_np.shape[2:]))

        def prepare() -> Timed:
            x, w = t(x_np).requires_grad_(), t(w_np).requires_grad_()
            out = F.conv2d(x, w, padding=1)
            grads = lambda: torch.autograd.grad(out, (x, w), grad_out)  # noqa: E731
            return (lambda: (grads(), torch.cuda.synchronize())) if on_gpu else grads

        return prepare

    def train_steps(step: Callable[[], Any], steps: int) -> Prepare:
        def run() -> None:
            for _ in range(steps):
                step()

        return timed(run)

    def cnn(batch: int) -> Prepare:
        return train_steps(torch_cnn_step(torch, batch, device), 1)

    def mlp() -> Prepare:
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        step = torch_step(torch, model, lambda p: torch.optim.SGD(p, lr=0.01), rand(64, 64), device)
        return train_steps(step, MLP_STEPS)

    rows: dict[str, Callable[..., Prepare]] = {
        "tiny": tiny, "tiny_sync": tiny, "jit": chain, "jit_sync": chain, "elementwise": elementwise,
        "exp": exp_chain, "sum": total, "softmax": softmax, "matmul": matmul, "conv2d": conv,
        "conv2d_backward": conv_backward, "cnn": cnn, "mlp": mlp, "embedding": embedding, "sort": sort,
        "topk": topk,
    }  # fmt: skip
    if not on_gpu:  # the fresh-process rows run PyTorch on the CPU
        rows |= {key: functools.partial(fresh_cnn_step, "PyTorch", "CPU", how=how)
                 for key, how in FRESH_CNN_ROWS.items()}  # fmt: skip
    return rows


LIB_ROWS: dict[str, Callable[..., Prepare]] = {
    "tiny": lib_tiny, "tiny_sync": functools.partial(lib_tiny, sync_each=True), "jit": lib_jit_chain,
    "jit_sync": functools.partial(lib_jit_chain, sync_each=True), "elementwise": lib_elementwise, "exp": lib_exp_chain,
    "sum": lib_sum, "softmax": lib_softmax, "matmul": lib_matmul, "conv2d": lib_conv,
    "conv2d_backward": lib_conv_backward, "cnn": lib_cnn, "mlp": lib_mlp, "embedding": lib_embedding, "sort": lib_sort,
    "topk": lib_topk,
    **{key: functools.partial(lib_fresh_cnn_step, how=how) for key, how in FRESH_CNN_ROWS.items()},
}  # fmt: skip


# -- the rows --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """The problem sizes of a run: the issue's (FULL), or small ones for a smoke run (QUICK)."""

    vector: int  # elements of the 1-d rows (elementwise, exp chain, sum)
    softmax: int  # rows = columns
    matmul: tuple[int, ...]
    conv: ConvShape
    cnn_batch: int
    embedding: tuple[int, int, int]  # vocabulary, width, tokens
    sort: int
    topk: tuple[int, int]  # elements, k (a language model's sampling: the top 10 of GPT-2's 50257 logits)


FULL = Sizes(16 << 20, 4096, (1024, 2048), ConvShape(16, 64, 64, 56), 512, (50257, 768, 512), 65536, (50257, 10))
QUICK = Sizes(1 << 20, 1024, (256, 512), ConvShape(2, 16, 16, 28), 8, (5000, 64, 64), 4096, (5000, 10))


@dataclass(frozen=True)
class Workload:
    """One row per device: `key` (what --rows names) picks the implementation of each library, called with `args`.
    `work` is what one repetition does in the unit's terms (flops, bytes moved, steps or ops)."""

    key: str
    title: str
    unit: Unit
    work: float
    args: tuple[Any, ...] = ()
    warmup: int = 1
    # devices where the row runs only when --rows names it, and why
    only_if_named_on: dict[str, str] = field(default_factory=dict)
    quick: bool = True  # False: --quick runs the row only when --rows names it (it takes a minute at any size)
    # repetitions each column gets whatever the budget: a fresh-process row's one repetition takes seconds, and the
    # best of one or two moved by a second between runs (a cold CNN step 2.4-3.5 s)
    min_reps: int = 1


def workloads(sizes: Sizes) -> list[Workload]:
    n, m, conv, batch = sizes.vector, sizes.softmax, sizes.conv, sizes.cnn_batch
    vocab, width, tokens = sizes.embedding
    vector = f"{n >> 20}M float32"
    conv_title = (f"conv2d batch {conv.batch}, {conv.channels_in}->{conv.channels_out} channels, "
                  f"{conv.size}x{conv.size}, 3x3, pad 1")  # fmt: skip
    cnn_title = f"CNN train step (MNIST layer stack, Adam), batch {batch}"
    eager, eager_sync = " (numpy, PyTorch: eager ops)", " (numpy, PyTorch: no sync, they compute before returning)"
    replayed = JIT_CALLS * JIT_OPS
    # (the steady step runs on CL too since its weight gradients got the CPU's tile: PoCL compiles its kernels in ~30 s)
    cnn_on_cl = "on PoCL, each fresh process compiles the CNN step's kernels anew (~30 s)"
    # each repetition is a fresh process that reports its own time: no warm-up
    cold_start = [Workload(key, f"first CNN train step, batch {batch}, fresh process, {how.title}", SECONDS, 1,
                           (batch,), warmup=0, only_if_named_on={"CL": cnn_on_cl}, quick=False, min_reps=3)
                  for key, how in FRESH_CNN_ROWS.items()]  # fmt: skip
    return [
        Workload("tiny", "cached tiny op `(x+1).realize()`, 16 elements", US_PER_OP, TINY_COUNT),
        Workload("tiny_sync", f"cached tiny op, device sync after each{eager_sync}", US_PER_OP, TINY_COUNT),
        Workload("jit", f"jit replay of {JIT_OPS} tiny ops, one kernel each, per op{eager}", US_PER_OP, replayed),
        Workload("jit_sync", f"jit replay, device sync after each replay, per op{eager}", US_PER_OP, replayed),
        Workload("elementwise", f"`(a+b)*c`, {vector}", GBS, 4 * 4 * n, (n,)),
        Workload("exp", f"`exp(relu(a*b+c)*0.5)`, {vector}", GBS, 4 * 4 * n, (n,)),
        Workload("softmax", f"softmax over rows of {m}x{m} float32", GBS, 2 * 4 * m * m, (m,)),
        Workload("sum", f"sum of {vector}", GBS, 4 * n, (n,)),
        *(Workload("matmul", f"matmul {k}x{k} float32", GFLOPS, 2 * k**3, (k,)) for k in sizes.matmul),
        Workload("conv2d", f"{conv_title}, forward", GFLOPS, conv.flops, (conv,)),
        Workload("conv2d_backward", f"{conv_title}, backward (input + weight grads)", GFLOPS, 2 * conv.flops, (conv,)),
        # two warm-up steps: the jit runs the first eagerly and captures the second
        Workload("cnn", cnn_title, MS_PER_STEP, 1, (batch,), warmup=2),
        *cold_start,
        # one warm-up call: it runs MLP_STEPS steps, so the jit has captured the step before the timed calls
        Workload("mlp", "jitted MLP train step (64x64 batch, SGD)", US_PER_STEP, MLP_STEPS),
        Workload(
            "embedding",
            f"Embedding({vocab}, {width}), {tokens} tokens, forward + table gradient",
            MS_PER_STEP,
            1,
            sizes.embedding,
        ),  # fmt: skip
        Workload("sort", f"sort of {sizes.sort} float32 (values and indices)", MS, 1, (sizes.sort,)),
        Workload("topk", f"topk({sizes.topk[1]}) of {sizes.topk[0]} float32 (values and indices)", MS, 1, sizes.topk),
    ]


# -- running and reporting -------------------------------------------------------------------------------------------


def bench_rows(selected: list[Workload], devices: list[str], named: set[str], budget: Budget,
               torch_device: str = "cpu") -> list[str]:  # fmt: skip
    """The table rows, one per workload and device; numpy and PyTorch (on `torch_device`) run once per workload."""
    torch = load_torch()
    torch_impls = torch_rows(torch, torch_device) if torch else {}
    libs = {device: (lazy_lib(device), tinygrad_lib(device)) for device in devices}
    lines = []
    for work in selected:
        # every implementation of the row is set up first, then timed interleaved (`measure_cells`)
        numpy_cell = set_up("numpy", NUMPY_ROWS.get(work.key), work.args, work.warmup)
        torch_cell = set_up("PyTorch", torch_impls.get(work.key), work.args, work.warmup) if torch else None
        per_device: dict[str, tuple[Cell | None, Cell | None] | str] = {}
        for device in devices:
            lazy, tinygrad = libs[device]
            if device in work.only_if_named_on and work.key not in named:
                why = work.only_if_named_on[device]
                print(f"  {work.title} | {device}: skipped: {why}; `--rows {work.key}` runs it", file=sys.stderr)
                per_device[device] = f"skipped: `--rows {work.key}` runs it"
            else:
                per_device[device] = (
                    set_up(f"lazy {device}", LIB_ROWS[work.key], (lazy, *work.args), work.warmup),
                    set_up(f"tinygrad {device}", LIB_ROWS[work.key], (tinygrad, *work.args), work.warmup)
                    if tinygrad else None,
                )  # fmt: skip
        cells = [numpy_cell, torch_cell, *(c for v in per_device.values() if not isinstance(v, str) for c in v)]
        measure_cells([c for c in cells if c is not None], budget, work.min_reps)

        def figure(cell: Cell | None, work: Workload = work) -> Figure:
            return figure_of(cell, work.title, work.unit, work.work)

        numpy_fig = figure(numpy_cell)
        torch_fig = figure(torch_cell) if torch else "not installed"
        for device, found in per_device.items():
            lazy_fig: Figure
            tinygrad_fig: Figure
            if isinstance(found, str):
                lazy_fig, tinygrad_fig = found, "-"
            else:
                lazy_fig = figure(found[0])
                tinygrad_fig = figure(found[1]) if found[1] is not None else "n/a"
            row = [work.title, work.unit.name, device, lazy_fig, numpy_fig, torch_fig,
                   ratio(lazy_fig, numpy_fig), ratio(lazy_fig, torch_fig), tinygrad_fig]  # fmt: skip
            lines.append("| " + " | ".join(fmt_number(c) for c in row) + " |")
    return lines


COLUMNS = ("workload", "unit", "device", "lazy", "numpy", "PyTorch", "lazy / numpy", "lazy / PyTorch",
           "tinygrad (same device)")  # fmt: skip
NOTES = textwrap.wrap(
    f"Each figure is the best of its timed repetitions (at most {MAX_REPS}, while their total is under the --budget), "
    "after untimed warm-up calls (compilation; the jit's capture for the train steps). A row's columns are timed in "
    "turns (five blocks of repetitions each, after a pause), so that all meet the same phases of the machine. Each "
    "repetition "
    "builds the lazy graph anew, recomputes it and waits for the device. Ratios divide the figures as shown: above "
    "1x, lazy is faster for GFLOP/s and GB/s, slower for ms and us. GB/s counts each input read once and the output "
    "written once. numpy's conv2d is im2col (a copy of every 3x3 window) and one BLAS matmul per image; PyTorch runs "
    "out of place on all cores. The backward row times the input and weight gradients given the output's gradient, "
    "its forward untimed. The sync rows wait for the device after each op or replay; numpy and PyTorch compute "
    f"before returning, so their cells there time the same code as without. The jit rows replay a captured chain of "
    f"{JIT_OPS} adds on 16 elements, one kernel each (a replay's kernel count is checked), {JIT_CALLS} replays per "
    "repetition; numpy and PyTorch run the adds eagerly. The first-step rows (s) run each repetition in a fresh "
    "interpreter whose compile caches (lazy's, PoCL's, tinygrad's) are in an empty directory, or (warm) in one an "
    "earlier, untimed process filled; it builds the model and batch, then times the first step (for lazy the jit's "
    "first, eager call) until its loss is a Python float, or from the process's start, imports included. PyTorch has "
    "no compile cache: its warm rows are another fresh process. Import times need bytecode: run `python -m compileall "
    "-q core/src plugins` first.",
    width=115,
)


def parse_args(names: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="rows: " + ", ".join(names) + " (the first-step CNN rows run on CL only when --rows names them: "
        "each repetition compiles anew; --quick runs the cnn_cold and cnn_warm rows only when --rows names them)",
    )  # fmt: skip
    parser.add_argument("--devices", default="CPU,LLVM", help="lazy devices, comma-separated (default: CPU,LLVM)")
    parser.add_argument("--rows", default=None, help="rows to run, comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes and a short budget: a smoke run (< 1 min)")
    budget_help = "seconds of timed repetitions per figure, at least one (default 3, quick 0.1)"
    parser.add_argument("--budget", type=float, default=None, help=budget_help)
    torch_help = "PyTorch's device for its column: cpu (default) or cuda, beside lazy's CUDA (each repetition synced)"
    parser.add_argument("--torch-device", default="cpu", help=torch_help)
    out_help = "Markdown file whose section between the bench markers is rewritten ('' writes nothing)"
    parser.add_argument("--out", default="docs/benchmarks.md", help=out_help)
    args = parser.parse_args()
    unknown = set((args.rows or "").split(",")) - set(names) - {""}
    if unknown:
        parser.error(f"--rows: unknown row(s) {', '.join(sorted(unknown))}; the rows are {', '.join(names)}")
    from lazy import Device

    for device in args.devices.split(","):
        try:
            Device[device]
        except Exception as e:
            parser.error(f"--devices: {device} cannot be opened: {e}")
    return args


def main() -> None:
    names = ["import", *dict.fromkeys(w.key for w in workloads(QUICK)), *report.MULTI_DEVICE_ROWS]
    args = parse_args(names)
    sizes = QUICK if args.quick else FULL
    seconds = args.budget if args.budget is not None else 0.1 if args.quick else 3.0
    budget = Budget(seconds, 3 if args.quick else MAX_REPS)
    devices, named = args.devices.split(","), set(args.rows.split(",")) if args.rows else set()
    selected = [w for w in workloads(sizes) if w.key in named or (not named and (w.quick or not args.quick))]

    lines = report.machine_lines(devices, load_torch()) + [""]
    if not named or "import" in named:
        runs = 2 if args.quick else 5
        lines += [f"`import lazy` (median of {runs} fresh processes): **{report.import_time(runs) * 1e3:.0f} ms**", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += bench_rows(selected, devices, named, budget, args.torch_device)
    lines += ["", *NOTES, *([f"PyTorch ran on {args.torch_device}."] if args.torch_device != "cpu" else []), ""]
    # issue 14's: allreduce bandwidth against the memory copy, data-parallel scaling over MPI (a minute or two: in a
    # full run, or when --rows names it)
    for key in report.MULTI_DEVICE_ROWS:
        if key in named or (not named and (key == "allreduce" or not args.quick)):
            lines += report.multi_device_lines(key, args.quick)
    table = "\n".join(lines)
    print(table)
    if args.out:
        report.write_section(args.out, table)


if __name__ == "__main__":
    if fresh.is_child(sys.argv):
        fresh.child_main(sys.argv, FRESH_PROCESS_RUNS)
    else:
        main()
