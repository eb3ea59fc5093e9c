"""The scalar keywords' types, checked one way for every operator: a wrong
type or value raises one line naming the keyword, never the binding's list
of signatures, and nothing truthy passes for a flag."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

COMPUTE_DTYPES = ("fp32", "fp16", "bf16")


def integer(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {value!r}")
    return int(value)


def optional_integer(name: str, value: Any) -> Optional[int]:
    return None if value is None else integer(name, value)


def number(name: str, value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    return float(value)


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def dtype_name(name: str, value: Any, allowed: Sequence[str] = COMPUTE_DTYPES) -> Any:
    """An output dtype given by name (None: the operator's default)."""
    if value is not None and value not in allowed:
        raise ValueError(f"{name}: {value!r} (expected {', '.join(allowed)})")
    return value


def set_field(params: Any, field: str, value: Any) -> None:
    """params.field = value for an integer field: the type checked here,
    the range where the binding refuses it."""
    value = integer(field, value)
    try:
        setattr(params, field, value)
    except TypeError:
        raise ValueError(f"{field}: {value} is out of range") from None


def window(value: Any) -> Tuple[Optional[int], Optional[int]]:
    """flash-attn's window_size (left, right): each an integer, or None or a
    negative number for no limit."""
    try:
        left, right = value
    except (TypeError, ValueError):
        raise TypeError(f"window: expected (left, right), got {value!r}") from None
    for side in (left, right):
        if side is not None and (isinstance(side, (bool, np.bool_)) or not isinstance(side, (int, np.integer))):
            raise TypeError(f"window: expected (left, right) of integers or None, got {value!r}")
    return left, right
