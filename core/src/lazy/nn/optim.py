"""Optimisers: each step writes new values into the parameters' own buffers (`assign`), so a `jit` can replay it."""

from __future__ import annotations

from collections.abc import Iterable

from lazy.dtype import dtypes
from lazy.helpers import dedup
from lazy.tensor import Tensor


class Optimizer:
    def __init__(self, params: Iterable[Tensor], lr: float):
        if isinstance(params, dict):
            raise TypeError(f"{type(self).__name__}: got a dict (a state dict?); pass its tensors, e.g. "
                            "get_parameters(model) or list(state_dict.values())")  # fmt: skip
        params = list(params)  # (a generator, `model.parameters()`-style, is read once)
        if bad := [p for p in params if not isinstance(p, Tensor)]:
            raise TypeError(f"{type(self).__name__}: parameters must be Tensors, got {type(bad[0]).__name__} "
                            f"{bad[0]!r:.40}")  # fmt: skip
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr >= 0:
            raise ValueError(f"{type(self).__name__}: the learning rate must be a number >= 0, got {lr!r}")
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        self.params = dedup([p for p in params if p.requires_grad])
        if not self.params:
            raise ValueError("optimizer got no parameters that require a gradient")
        self.buffers = dedup([p for p in params if not p.requires_grad])
        self.lr = Tensor([lr], requires_grad=False, device=self.params[0].device).contiguous().realize()

    def _state_like_params(self) -> list[Tensor]:
        """One zero-filled, realized buffer per parameter (momenta, moments): the optimizer's own state, in the
        default float, laid out as its parameter (a sharded parameter's state holds one slice per device)."""
        return [
            p.zeros_like(dtype=dtypes.default_float, requires_grad=False).contiguous().realize() for p in self.params
        ]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        if not Tensor._training_mode():
            raise RuntimeError("optimizer step outside training mode: wrap the loop in `with Tensor.train():` or "
                               "`with Context(TRAINING=1):`")  # fmt: skip
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise RuntimeError(f"parameters {missing} have no gradient: call loss.backward() before step()")
        return self._step() + self.params + self.buffers

    def _step(self) -> list[Tensor]:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (Nesterov too) and weight decay."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False):  # fmt: skip
        super().__init__(params, lr)
        if nesterov and not momentum:
            raise ValueError("SGD: nesterov=True needs a momentum above 0 (it looks ahead along the momentum)")
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.b = self._state_like_params() if momentum else []

    def _step(self) -> list[Tensor]:
        for i, p in enumerate(self.params):
            assert p.grad is not None
            g = p.grad.detach() + self.wd * p.detach()
            if self.momentum:
                self.b[i].assign(self.momentum * self.b[i] + g)
                g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
            p.assign((p.detach() - g * self.lr).cast(p.dtype))
        return self.b


class LAMB(Optimizer):
    """LAMB; with `adam=True` (and no trust ratio) it is Adam/AdamW."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.0, adam: bool = False):  # fmt: skip
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        device = self.params[0].device
        self.b1_t = Tensor.ones(1, device=device, requires_grad=False).contiguous().realize()
        self.b2_t = Tensor.ones(1, device=device, requires_grad=False).contiguous().realize()
        self.m, self.v = self._state_like_params(), self._state_like_params()

    def _step(self) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        for i, p in enumerate(self.params):
            assert p.grad is not None
            g = p.grad.detach()
            self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
            self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
            m_hat = self.m[i] / (1.0 - self.b1_t)
            v_hat = self.v[i] / (1.0 - self.b2_t)
            up = (m_hat / (v_hat.sqrt() + self.eps)) + self.wd * p.detach()
            if not self.adam:
                r1 = p.detach().square().sum().sqrt()
                r2 = up.square().sum().sqrt()
                up = up * ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
            p.assign((p.detach() - self.lr * up).cast(p.dtype))
        return [self.b1_t, self.b2_t] + self.m + self.v


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:  # noqa: N802
    return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)


def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,  # noqa: N802
          weight_decay: float = 0.01) -> LAMB:  # fmt: skip
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)


class LARS(Optimizer):
    """SGD with momentum whose step for each parameter is scaled by its trust ratio ||w|| / ||g + wd*w||."""

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
                 nesterov: bool = False, trust_coefficient: float = 0.001):  # fmt: skip
        super().__init__(params, lr)
        self.momentum, self.wd, self.nesterov, self.tc = momentum, weight_decay, nesterov, trust_coefficient
        self.b = self._state_like_params()

    def _step(self) -> list[Tensor]:
        for i, p in enumerate(self.params):
            assert p.grad is not None
            g = p.grad.detach()
            w_norm, g_norm = p.detach().square().sum().sqrt(), g.square().sum().sqrt()
            ratio = ((w_norm > 0) & (g_norm > 0)).where(self.tc * w_norm / (g_norm + self.wd * w_norm), 1.0)
            g = (g + self.wd * p.detach()) * ratio
            self.b[i].assign(self.momentum * self.b[i] + g)
            g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
            p.assign((p.detach() - g * self.lr).cast(p.dtype))
        return self.b
