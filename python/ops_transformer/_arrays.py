"""Arrays of any framework, seen by the library without copies.

The library reads strided 4-D views with logical axes [batch, heads, seq,
head_dim].  This module names each array's dtype the library's way, turns
the layouts users store (flash_attn's [batch, seq, heads, dim], SDPA's
[batch, heads, seq, dim], packed [tokens, heads, dim]) into such views by
transposing strides only, and allocates outputs in the input's framework:
NumPy arrays and PyTorch tensors natively, any other DLPack producer (JAX,
CuPy on the host, ...) read through NumPy's DLPack import and answered in
its own framework where that framework has a ``from_dlpack``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _core

try:  # NumPy has no bfloat16 or FP8 of its own: ml_dtypes gives them.
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency of the package
    _ml_dtypes = None

# The library's dtype names (fa::parse_dtype) of each framework's dtypes.
_NUMPY_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "int8",
                "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}
_TORCH_NAMES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.int8": "int8",
                "torch.float8_e4m3fn": "fp8_e4m3", "torch.float8_e5m2": "fp8_e5m2"}
# Dtypes a framework cannot hand over by buffer protocol or DLPack: passed as
# unsigned integers of the same width (the library is told the real dtype).
_RAW_NUMPY = {"bf16": np.uint16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8}
_RAW_TORCH = {"fp8_e4m3", "fp8_e5m2"}

LAYOUTS = ("BSND", "BNSD", "BSH", "TND")


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and "torch" in sys.modules


class Array:
    """One input or output: the caller's object, its framework and dtype name."""

    def __init__(self, obj: Any, what: str):
        self.what = what
        if isinstance(obj, np.ndarray):
            self.kind, self.obj = "numpy", obj
        elif is_torch(obj):
            torch = sys.modules["torch"]
            if not isinstance(obj, torch.Tensor):
                raise TypeError(f"{what}: expected an array or tensor, got {type(obj).__name__}")
            if not obj.is_cpu:
                raise ValueError(f"{what}: tensor on {obj.device}, expected a CPU tensor")
            if obj.layout is not torch.strided:  # sparse layouts have no strides to read
                raise TypeError(f"{what}: a {obj.layout} tensor, expected a dense one (torch.strided; "
                                f"call .to_dense())")
            if obj.is_neg():  # a negated view: DLPack would hand over its memory un-negated
                obj = obj.resolve_neg()
            self.kind, self.obj = "torch", obj
        elif hasattr(obj, "__dlpack__"):
            self.kind, self.obj = "dlpack", np.from_dlpack(obj)
            self.source = obj
        else:
            raise TypeError(f"{what}: expected a NumPy array or a DLPack tensor (PyTorch, JAX), got {type(obj).__name__}")
        self.dtype = dtype_name(self.obj, what)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.obj.shape)


# The same, keyed by the dtype objects themselves: a dict lookup, where
# dtype.name and str(dtype) cost microseconds a call (this is the per-call
# path; the names above are the fallback for byte-swapped and other forms).
_BY_DTYPE: dict = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(np.int8): "int8"}
if _ml_dtypes is not None:
    _BY_DTYPE.update({np.dtype(_ml_dtypes.bfloat16): "bf16", np.dtype(_ml_dtypes.float8_e4m3fn): "fp8_e4m3",
                      np.dtype(_ml_dtypes.float8_e5m2): "fp8_e5m2"})


# The extension's one-crossing forward call (_core.attention_direct) on
# NumPy arrays of the dtypes it computes in.
_core.set_numpy_fast_path({dt: name for dt, name in _BY_DTYPE.items() if name in ("fp32", "fp16", "bf16")})


def _torch_by_dtype() -> dict:
    import torch
    table = {getattr(torch, key.split(".")[1]): name for key, name in _TORCH_NAMES.items()
             if hasattr(torch, key.split(".")[1])}
    _BY_DTYPE.update(table)
    return table


def dtype_name(x: Any, what: str) -> str:
    """The library's name of x's dtype (fp32, fp16, bf16, int8, fp8_e4m3, fp8_e5m2)."""
    name = _BY_DTYPE.get(x.dtype)
    if name is not None:
        return name
    if isinstance(x, np.ndarray):
        name = _NUMPY_NAMES.get(x.dtype.name) if x.dtype.isnative else None
    else:
        name = _torch_by_dtype().get(x.dtype)
    if name is None:
        raise TypeError(f"{what}: dtype {x.dtype} is not supported "
                        "(expected float32, float16, bfloat16, int8 (a K/V cache), float8_e4m3fn or float8_e5m2)")
    return name


def raw(x: Any, dtype: str) -> Any:
    """x as the extension takes it: same memory, a same-width integer dtype
    where the framework cannot export the real one."""
    if isinstance(x, np.ndarray):
        return x.view(_RAW_NUMPY[dtype]) if dtype in _RAW_NUMPY else x
    if dtype in _RAW_TORCH:
        import torch
        return x.view(torch.uint8)
    return x


def transpose12(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.transpose(0, 2, 1, 3) if x.ndim == 4 else np.swapaxes(x, 1, 2)
    return x.transpose(1, 2)


def unit_last_stride(x: Any) -> Any:
    """x itself when its last dimension is contiguous, else a contiguous copy."""
    if isinstance(x, np.ndarray):
        return x if x.shape[-1] <= 1 or x.strides[-1] == x.itemsize else np.ascontiguousarray(x)
    return x if x.shape[-1] <= 1 or x.stride(-1) == 1 else x.contiguous()


def logical_view(x: Any, layout: str, num_heads: Optional[int], what: str) -> Any:
    """A view of x with axes [batch, heads, seq, head_dim] (strides only)."""
    if layout == "BNSD":
        if x.ndim != 4:
            raise ValueError(f"{what}: expected 4 dimensions [batch, heads, seq, head_dim] (BNSD), got shape {tuple(x.shape)}")
        return x
    if layout == "BSND":
        if x.ndim != 4:
            raise ValueError(f"{what}: expected 4 dimensions [batch, seq, heads, head_dim] (BSND), got shape {tuple(x.shape)}")
        return transpose12(x)
    if layout == "TND":
        if x.ndim != 3:
            raise ValueError(f"{what}: expected 3 dimensions [tokens, heads, head_dim] (TND), got shape {tuple(x.shape)}")
        return transpose12(x[None])
    if layout == "BSH":
        if x.ndim != 3:
            raise ValueError(f"{what}: expected 3 dimensions [batch, seq, heads * head_dim] (BSH), got shape {tuple(x.shape)}")
        if not num_heads or x.shape[2] % num_heads:
            raise ValueError(f"{what}: hidden size {x.shape[2]} is not a multiple of the {num_heads} heads (BSH)")
        split = x.reshape(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads)
        return transpose12(split)
    raise ValueError(f"layout: '{layout}' (expected one of {', '.join(LAYOUTS)})")


def empty_like(template: Array, shape: Sequence[int], dtype: str) -> Any:
    """An uninitialised array of `shape` and library dtype `dtype` in the
    template's framework (NumPy for other DLPack producers, converted back by
    to_caller)."""
    if template.kind == "torch":
        if not _TORCH_BY_NAME:
            _TORCH_BY_NAME.update({name: dt for dt, name in _torch_by_dtype().items()})
        return sys.modules["torch"].empty(tuple(shape), dtype=_TORCH_BY_NAME[dtype])
    return np.empty(tuple(shape), dtype=numpy_dtype(dtype))


_TORCH_BY_NAME: dict = {}  # library dtype name -> torch dtype, filled on first use


def numpy_dtype(dtype: str) -> Any:
    if dtype in ("fp32", "fp16", "int8"):
        return {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}[dtype]
    if _ml_dtypes is None:
        raise TypeError(f"{dtype} arrays in NumPy need the ml_dtypes package (pip install ml-dtypes)")
    return {"bf16": _ml_dtypes.bfloat16, "fp8_e4m3": _ml_dtypes.float8_e4m3fn,
            "fp8_e5m2": _ml_dtypes.float8_e5m2}[dtype]


def aux(x: Any, what: str, dtype: Any) -> Any:
    """An auxiliary array (mask, cu_seqlens, slopes, ...) as a contiguous
    NumPy array of `dtype` (a copy only when its dtype or layout differs:
    these are small)."""
    if x is None:
        return None
    if is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            raise ValueError(f"{what}: tensor on {x.device}, expected a CPU tensor")
        x = x.numpy() if str(x.dtype) != "torch.bool" else x.to(dtype=__import__("torch").int8).numpy()
    elif not isinstance(x, np.ndarray):
        x = np.from_dlpack(x) if hasattr(x, "__dlpack__") else np.asarray(x)
    return np.ascontiguousarray(x, dtype=dtype)


def to_caller(template: Array, result: Any) -> Any:
    """result (in the template's framework, or NumPy) handed back in the
    framework the caller's input came from."""
    if template.kind != "dlpack" or not isinstance(result, np.ndarray):
        return result
    root = type(template.source).__module__.split(".")[0]
    module = sys.modules.get(root)
    for name in ("from_dlpack", "numpy.from_dlpack"):
        target = module
        for part in name.split("."):
            target = getattr(target, part, None) if target is not None else None
        if callable(target):
            try:
                return target(result)
            except Exception:  # a framework that cannot import this dtype: NumPy it is
                return result
    try:
        return importlib.import_module(root + ".numpy").asarray(result)
    except Exception:
        return result


def from_float64(template: Array, result: np.ndarray) -> Any:
    """A float64 NumPy result in the template's framework."""
    if template.kind == "torch":
        import torch
        return torch.from_numpy(result)
    return to_caller(template, result)
