"""Model state: find a model's tensors by attribute path, and load them back with shape and dtype checks."""

from __future__ import annotations

from typing import Any

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
