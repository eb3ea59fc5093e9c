"""The other operators: LayerNorm and RMSNorm (with the fused residual add),
rotary position embedding, and the gated linear units.

Each reads its inputs where they lie (rows of the last dimension, any
leading shape that flattens to rows without a copy) and returns new arrays
in the input's framework; statistics and arithmetic are fp32 for every
dtype.  No autograd: these are the library's forward operators.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from . import _args
from . import _arrays
from . import _core


def _rows(x: Any, what: str) -> Any:
    """x [..., hidden] as a [rows, hidden] view; a copy would be refused."""
    if x.ndim == 2:
        return x
    if x.ndim < 1:
        raise ValueError(f"{what}: expected at least 1 dimension, got a scalar")
    hidden = x.shape[-1]
    if isinstance(x, np.ndarray):
        view = x.view()
        try:
            view.shape = (-1, hidden)  # raises instead of copying
        except AttributeError:
            raise ValueError(f"{what}: its leading dimensions do not flatten into rows without a copy") from None
        return view
    try:
        return x.view(-1, hidden)
    except RuntimeError:
        raise ValueError(f"{what}: its leading dimensions do not flatten into rows without a copy") from None


def _param(x: Any, what: str) -> Tuple[Any, Optional[str]]:
    if x is None:
        return None, None
    a = _arrays.Array(x, what)
    return a, a.dtype


def _norm(kind: str, x: Any, weight: Any, bias: Any, eps: Optional[float], residual: Any, return_stats: bool,
          out_dtype: Optional[str], threads: int, isa: Optional[str]) -> Any:
    xa = _arrays.Array(x, "x")
    eps = None if eps is None else _args.number("eps", eps)
    threads, out_dtype = _args.integer("threads", threads), _args.dtype_name("out_dtype", out_dtype)
    return_stats = _args.flag("return_stats", return_stats)
    w, w_dtype = _param(weight, "weight")
    b, b_dtype = _param(bias, "bias")
    if w_dtype and b_dtype and w_dtype != b_dtype:
        raise TypeError(f"weight and bias: dtypes {w_dtype} and {b_dtype} differ")
    param_dtype = w_dtype or b_dtype or "fp32"
    out_dtype = out_dtype or xa.dtype
    out = _arrays.empty_like(xa, xa.shape, out_dtype)
    rows = int(np.prod(xa.shape[:-1], dtype=np.int64))
    r = s = None
    if residual is not None:
        ra = _arrays.Array(residual, "residual")
        if ra.dtype != xa.dtype:
            raise TypeError(f"residual: dtype {ra.dtype} differs from x's ({xa.dtype})")
        r = _arrays.raw(_rows(ra.obj, "residual"), xa.dtype)
        s = _arrays.empty_like(xa, xa.shape, xa.dtype)
    mean = _arrays.empty_like(xa, (rows,), "fp32") if return_stats and kind == "layer_norm" else None
    rstd = _arrays.empty_like(xa, (rows,), "fp32") if return_stats else None
    _core.norm(kind, _arrays.raw(_rows(xa.obj, "x"), xa.dtype), xa.dtype, _arrays.raw(_rows(out, "out"), out_dtype),
               out_dtype, r, None if s is None else _arrays.raw(_rows(s, "sum"), xa.dtype),
               None if w is None else _arrays.raw(w.obj, param_dtype),
               None if b is None else _arrays.raw(b.obj, param_dtype), param_dtype, mean, rstd, eps, threads, isa)
    result = [_arrays.to_caller(xa, out)]
    if s is not None:
        result.append(_arrays.to_caller(xa, s))
    if return_stats:
        stats_shape = tuple(xa.shape[:-1])
        if mean is not None:
            result.append(_arrays.to_caller(xa, mean.reshape(stats_shape)))
        result.append(_arrays.to_caller(xa, rstd.reshape(stats_shape)))
    return result[0] if len(result) == 1 else tuple(result)


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: Optional[float] = None, *, residual: Any = None,
               return_stats: bool = False, out_dtype: Optional[str] = None, threads: int = 0,
               isa: Optional[str] = None) -> Any:
    """LayerNorm over the last dimension (eps 1e-5 unless given; statistics in
    fp32 with a two-pass variance).  With residual: normalizes x + residual
    and returns (y, x + residual).  With return_stats: also the row means and
    1 / sqrt(var + eps) (fp32, x's leading shape)."""
    return _norm("layer_norm", x, weight, bias, eps, residual, return_stats, out_dtype, threads, isa)


def rms_norm(x: Any, weight: Any = None, eps: Optional[float] = None, *, residual: Any = None,
             return_stats: bool = False, out_dtype: Optional[str] = None, threads: int = 0,
             isa: Optional[str] = None) -> Any:
    """RMSNorm over the last dimension (eps 1e-6 unless given).  With
    residual: the pre-norm block's fused add, (y, x + residual) in one pass
    over memory.  With return_stats: also 1 / sqrt(mean(x^2) + eps)."""
    return _norm("rms_norm", x, weight, None, eps, residual, return_stats, out_dtype, threads, isa)


def norm_reference(kind: str, x: Any, weight: Any = None, bias: Any = None, eps: Optional[float] = None, *,
                   residual: Any = None) -> Any:
    """The float64 reference of layer_norm (kind "layer_norm") or rms_norm
    ("rms_norm"), in x's shape."""
    xa = _arrays.Array(x, "x")
    w, w_dtype = _param(weight, "weight")
    b, b_dtype = _param(bias, "bias")
    param_dtype = w_dtype or b_dtype or "fp32"
    r = None if residual is None else _arrays.raw(_rows(_arrays.Array(residual, "residual").obj, "residual"), xa.dtype)
    y = _core.norm_reference(kind, _arrays.raw(_rows(xa.obj, "x"), xa.dtype), xa.dtype, r,
                             None if w is None else _arrays.raw(w.obj, param_dtype),
                             None if b is None else _arrays.raw(b.obj, param_dtype), param_dtype, eps)
    return _arrays.from_float64(xa, y.reshape(xa.shape))


_ROPE_DEFAULTS = dict(mode="rotate_half", rotary_dim=0, base=10000.0, scaling="none", factor=1.0,
                      low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192.0)


def _rope_options(options: dict) -> dict:
    """The rotation's keywords over their defaults, their types checked."""
    unknown = set(options) - set(_ROPE_DEFAULTS)
    if unknown:
        raise TypeError(f"rope: unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    opts = dict(_ROPE_DEFAULTS, **options)
    for name in ("base", "factor", "low_freq_factor", "high_freq_factor", "original_max_position"):
        opts[name] = _args.number(name, opts[name])
    opts["rotary_dim"] = _args.integer("rotary_dim", opts["rotary_dim"])
    return opts


def _rope_views(q: Any, k: Any, layout: str, num_heads: Optional[int], num_kv_heads: Optional[int]):
    qa = None if q is None else _arrays.Array(q, "q")
    ka = None if k is None else _arrays.Array(k, "k")
    if qa is None and ka is None:
        raise ValueError("q and k: give at least one")
    if qa is not None and ka is not None and qa.dtype != ka.dtype:
        raise TypeError(f"q and k: dtypes {qa.dtype} and {ka.dtype} differ")
    dtype = (qa or ka).dtype
    if not isinstance(layout, str):
        raise TypeError(f"layout: expected a string ({', '.join(_arrays.LAYOUTS)}), got {type(layout).__name__}")
    layout = layout.upper()
    qv = None if qa is None else _arrays.logical_view(qa.obj, layout, num_heads, "q")
    kv = None if ka is None else _arrays.logical_view(ka.obj, layout, num_kv_heads or num_heads, "k")
    return qa, ka, qv, kv, dtype, layout


def _rope_aux(positions: Any, cos: Any, sin: Any, cu_seqlens: Any):
    positions = _arrays.aux(positions, "positions", np.int64)
    if positions is not None:
        positions = positions.reshape(-1)  # [batch, seq] row-major, or TND's [tokens]
    return (positions, _arrays.aux(cos, "cos", np.float32),
            _arrays.aux(sin, "sin", np.float32), _arrays.aux(cu_seqlens, "cu_seqlens", np.int32))


def rope(q: Any = None, k: Any = None, *, layout: str = "BSND", positions: Any = None, cos: Any = None,
         sin: Any = None, cu_seqlens: Any = None, inplace: bool = False, out_dtype: Optional[str] = None,
         num_heads: Optional[int] = None, num_kv_heads: Optional[int] = None, threads: int = 0,
         isa: Optional[str] = None, **options: Any) -> Tuple[Any, Any]:
    """Rotary position embedding of q and k (either may be None), stored in
    `layout` (BSND, BNSD, BSH with num_heads / num_kv_heads, TND with
    cu_seqlens).  Options: mode ("rotate_half", GPT-NeoX and Llama, or
    "interleaved", GPT-J), rotary_dim (0: head_dim), base, scaling ("none",
    "linear", "ntk", "llama3") with factor, low_freq_factor,
    high_freq_factor, original_max_position; or the angles' cos and sin
    tables ([positions, rotary_dim / 2]).  positions: int64 per token
    ([batch, seq], TND [tokens]) for a KV-cache step.  Returns (q, k)
    rotated: new arrays, or with inplace=True the inputs themselves."""
    opts = _rope_options(options)
    threads, out_dtype = _args.integer("threads", threads), _args.dtype_name("out_dtype", out_dtype)
    inplace = _args.flag("inplace", inplace)
    qa, ka, qv, kv, dtype, layout = _rope_views(q, k, layout, num_heads, num_kv_heads)
    if inplace and out_dtype not in (None, dtype):
        raise ValueError("out_dtype: an in-place rotation keeps the inputs' dtype")
    for array in (qa, ka):
        if inplace and array is not None and isinstance(array.obj, np.ndarray) and not array.obj.flags.writeable:
            raise ValueError(f"{array.what}: a read-only array cannot be rotated in place (inplace=False returns new ones)")
    out_dtype = out_dtype or dtype
    q_out = k_out = None
    if not inplace:
        q_out = None if qa is None else _arrays.empty_like(qa, qa.shape, out_dtype)
        k_out = None if ka is None else _arrays.empty_like(ka, ka.shape, out_dtype)
    positions, cos, sin, cu_seqlens = _rope_aux(positions, cos, sin, cu_seqlens)
    heads_k = num_kv_heads or num_heads
    _core.rope(None if qv is None else _arrays.raw(qv, dtype), None if kv is None else _arrays.raw(kv, dtype),
               None if q_out is None else _arrays.raw(_arrays.logical_view(q_out, layout, num_heads, "q_out"), out_dtype),
               None if k_out is None else _arrays.raw(_arrays.logical_view(k_out, layout, heads_k, "k_out"), out_dtype),
               dtype, out_dtype, opts["mode"], opts["rotary_dim"], opts["base"], opts["scaling"],
               opts["factor"], opts["low_freq_factor"], opts["high_freq_factor"],
               opts["original_max_position"], positions, cos, sin, cu_seqlens, threads, isa)
    if inplace:
        return (q, k)
    template = qa or ka
    return (None if q_out is None else _arrays.to_caller(template, q_out),
            None if k_out is None else _arrays.to_caller(template, k_out))


def rope_reference(q: Any = None, k: Any = None, *, layout: str = "BSND", positions: Any = None, cos: Any = None,
                   sin: Any = None, cu_seqlens: Any = None, num_heads: Optional[int] = None,
                   num_kv_heads: Optional[int] = None, **options: Any) -> Tuple[Any, Any]:
    """The float64 reference of rope, (q, k) in the inputs' layout."""
    opts = _rope_options(options)
    qa, ka, qv, kv, dtype, layout = _rope_views(q, k, layout, num_heads, num_kv_heads)
    positions, cos, sin, cu_seqlens = _rope_aux(positions, cos, sin, cu_seqlens)
    qr, kr = _core.rope_reference(None if qv is None else _arrays.raw(qv, dtype),
                                  None if kv is None else _arrays.raw(kv, dtype), dtype, opts["mode"],
                                  opts["rotary_dim"], opts["base"], opts["scaling"], opts["factor"],
                                  opts["low_freq_factor"], opts["high_freq_factor"],
                                  opts["original_max_position"], positions, cos, sin, cu_seqlens)

    def back(ref: Any, template: Any) -> Any:
        if ref is None:
            return None
        # [batch, heads, seq, dim] -> the layout's storage
        if layout == "BNSD":
            out = ref
        elif layout == "TND":
            out = np.swapaxes(ref, 1, 2)[0]
        else:
            out = np.swapaxes(ref, 1, 2)
            if layout == "BSH":
                out = out.reshape(out.shape[0], out.shape[1], -1)
        return _arrays.from_float64(template, np.ascontiguousarray(out))

    return back(qr, qa), back(kr, ka)


_GLU_KINDS = ("swiglu", "geglu", "geglu_tanh", "reglu")


def glu(x: Any, kind: str = "swiglu", *, split: str = "gate_first", out_dtype: Optional[str] = None,
        threads: int = 0, isa: Optional[str] = None) -> Any:
    """A gated linear unit of x [..., 2d] -> [..., d]: act(gate) * up, kind
    "swiglu" (SiLU), "geglu" (GELU, erf form), "geglu_tanh" (GELU, tanh
    form) or "reglu" (ReLU); split "gate_first" (x = [gate, up], Hugging
    Face's fused gate_up projection) or "up_first"."""
    xa = _arrays.Array(x, "x")
    threads, out_dtype = _args.integer("threads", threads), _args.dtype_name("out_dtype", out_dtype)
    if xa.shape[-1] % 2:
        raise ValueError(f"x: last dimension {xa.shape[-1]} is odd (expected [..., 2d])")
    out_dtype = out_dtype or xa.dtype
    out = _arrays.empty_like(xa, xa.shape[:-1] + (xa.shape[-1] // 2,), out_dtype)
    _core.glu(kind, _arrays.raw(_rows(xa.obj, "x"), xa.dtype), xa.dtype, _arrays.raw(_rows(out, "out"), out_dtype),
              out_dtype, split, threads, isa)
    return _arrays.to_caller(xa, out)


def swiglu(x: Any, **options: Any) -> Any:
    """glu(x, "swiglu"): SiLU(gate) * up."""
    return glu(x, "swiglu", **options)


def geglu(x: Any, approximate: str = "none", **options: Any) -> Any:
    """glu(x, "geglu"): GELU(gate) * up; approximate="tanh" for the tanh form
    (as torch.nn.functional.gelu's argument)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate: '{approximate}' (expected none or tanh)")
    return glu(x, "geglu" if approximate == "none" else "geglu_tanh", **options)


def reglu(x: Any, **options: Any) -> Any:
    """glu(x, "reglu"): ReLU(gate) * up."""
    return glu(x, "reglu", **options)


def glu_reference(x: Any, kind: str = "swiglu", *, split: str = "gate_first") -> Any:
    """The float64 reference of glu, [..., d]."""
    xa = _arrays.Array(x, "x")
    y = _core.glu_reference(kind, _arrays.raw(_rows(xa.obj, "x"), xa.dtype), xa.dtype, split)
    return _arrays.from_float64(xa, y.reshape(xa.shape[:-1] + (xa.shape[-1] // 2,)))
