"""FlashAttention forward and backward from Python, on any framework's arrays.

``attention`` and ``attention_backward`` take every feature of the C++
``AttentionParams`` by keyword; ``flash_attn_func``,
``flash_attn_varlen_func`` and ``scaled_dot_product_attention`` (module
``ops_transformer.compat``) keep the signatures of the functions of the same
names in flash-attn and PyTorch.  Inputs are read where they lie (any
strides); outputs are new arrays in the inputs' framework, in the layout of
Q.  With PyTorch tensors, calls go through the custom operator
``ops_transformer::attention`` (ops_transformer.torch_ops), which gives
autograd and torch.compile support.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _args
from . import _arrays
from . import _core

# The C++ library's "unbounded" band size (fa::kUnboundedTokens).
UNBOUNDED = 1 << 60
SPARSE_MODES = {"mask_and_band": 0, "all": 1, "causal_top_left": 2, "causal_bottom_right": 3, "band": 4}

# Arrays a call may point the library at, and their element types.
_AUX_DTYPES = {"mask": np.int8, "cu_seqlens_q": np.int32, "cu_seqlens_kv": np.int32, "seqlens_kv": np.int32,
               "block_table": np.int32, "sinks": np.float32, "alibi_slopes": np.float32, "bias": np.float32,
               "descale_q": np.float32, "descale_k": np.float32, "descale_v": np.float32}
# Features only inference uses: the backward pass refuses them, so a call
# with them never goes through the autograd operator.
INFERENCE_ONLY = ("seqlens_kv", "block_table", "descale_q", "descale_k", "descale_v", "k_scale", "v_scale")


class Call:
    """One call's parameters, views and auxiliary arrays, checked and built
    once (forward, backward and plan share it)."""

    def __init__(self, q: Any, k: Any, v: Any, *, layout: str = "BSND", version: int = 2, causal: bool = False,
                 scale: Optional[float] = None, sparse_mode: Optional[str] = None,
                 pre_tokens: Optional[int] = None, next_tokens: Optional[int] = None,
                 window: Optional[Tuple[int, int]] = None, mask: Any = None, sinks: Any = None,
                 softcap: float = 0.0, alibi_slopes: Any = None, bias: Any = None, dropout_p: float = 0.0,
                 dropout_seed: int = 0, cu_seqlens_q: Any = None, cu_seqlens_kv: Any = None,
                 seqlens_kv: Any = None, block_table: Any = None, block_size: int = 0,
                 descale_q: Any = None, descale_k: Any = None, descale_v: Any = None, k_scale: Any = None,
                 v_scale: Any = None, num_heads: Optional[int] = None, num_kv_heads: Optional[int] = None,
                 seq_kv: Optional[int] = None, num_splits: int = 0, tile_q: int = 0, tile_kv: int = 0,
                 threads: int = 0, isa: Optional[str] = None, async_prefetch: Optional[bool] = None,
                 out_dtype: Optional[str] = None, copy: bool = False):
        if not isinstance(layout, str):
            raise TypeError(f"layout: expected a string ({', '.join(_arrays.LAYOUTS)}), got {type(layout).__name__}")
        layout = layout.upper()
        num_heads, num_kv_heads = _args.optional_integer("num_heads", num_heads), \
            _args.optional_integer("num_kv_heads", num_kv_heads)
        seq_kv, out_dtype = _args.optional_integer("seq_kv", seq_kv), _args.dtype_name("out_dtype", out_dtype)
        if layout not in _arrays.LAYOUTS:
            raise ValueError(f"layout: '{layout}' (expected one of {', '.join(_arrays.LAYOUTS)})")
        if version not in (1, 2, 3):
            raise ValueError(f"version: {version!r} (expected 1, 2 or 3)")
        self.layout, self.version = layout, version
        self.q, self.k, self.v = _arrays.Array(q, "q"), _arrays.Array(k, "k"), _arrays.Array(v, "v")
        if self.k.dtype != self.v.dtype:
            raise TypeError(f"k and v: dtypes {self.k.dtype} and {self.v.dtype} differ (expected one K/V dtype)")
        if layout == "BSH" and num_heads is None:
            raise ValueError("num_heads: required with layout BSH ([batch, seq, heads * head_dim])")
        self.qv = _arrays.logical_view(self.q.obj, layout, num_heads, "q")
        kv_heads = num_kv_heads if num_kv_heads is not None else num_heads
        self.kv = _arrays.logical_view(self.k.obj, layout, kv_heads, "k")
        self.vv = _arrays.logical_view(self.v.obj, layout, kv_heads, "v")
        if copy:  # asked for: views whose head_dim is strided become contiguous copies
            self.qv, self.kv, self.vv = (_arrays.unit_last_stride(x) for x in (self.qv, self.kv, self.vv))
        varlen = cu_seqlens_q is not None or cu_seqlens_kv is not None
        if varlen and (cu_seqlens_q is None or cu_seqlens_kv is None):
            raise ValueError("cu_seqlens_q and cu_seqlens_kv: give both (packed variable-length sequences) or neither")
        if layout == "TND" and not varlen:
            raise ValueError("layout TND: needs cu_seqlens_q and cu_seqlens_kv")

        self.arrays: Dict[str, Any] = {}
        for name, value in (("mask", mask), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_kv", cu_seqlens_kv),
                            ("seqlens_kv", seqlens_kv), ("block_table", block_table), ("sinks", sinks),
                            ("alibi_slopes", alibi_slopes), ("bias", bias), ("descale_q", descale_q),
                            ("descale_k", descale_k), ("descale_v", descale_v)):
            if value is not None:
                self.arrays[name] = _arrays.aux(value, name, _AUX_DTYPES[name])
        for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
            if value is not None:
                scale_array = _arrays.aux(value, name, np.float32)
                self.arrays[name] = _arrays.logical_view(scale_array, layout, kv_heads, name)
        if "bias" in self.arrays and self.arrays["bias"].ndim == 2:
            self.arrays["bias"] = self.arrays["bias"][None]

        b, h, s_q, d = self.qv.shape
        # Only what differs from the C++ defaults is set below: each field
        # set is a crossing into the extension, on the per-call path.
        p = _core.AttentionParams(len(self.arrays["cu_seqlens_q"]) - 1 if varlen else b, s_q, self.kv.shape[2], h,
                                  self.kv.shape[1], d)
        if block_table is not None:
            block_size = _args.integer("block_size", block_size)
            if block_size <= 0:
                raise ValueError("block_size: required with block_table (a power of two from 16 to 512)")
            _args.set_field(p, "block_size", block_size)
            if self.kv.shape[2] < block_size or self.kv.shape[2] % block_size:
                raise ValueError(f"k: a block pool of {self.kv.shape[2]} tokens, expected whole blocks of "
                                 f"block_size {block_size} ([num_blocks * block_size] tokens)")
            p.kv_num_blocks = self.kv.shape[2] // block_size
            _args.set_field(p, "seq_kv", seq_kv if seq_kv is not None else self.arrays["block_table"].shape[1] * block_size)
        elif seq_kv is not None:
            _args.set_field(p, "seq_kv", seq_kv)
        if scale is not None:
            p.scale = _args.number("scale", scale)
        if _args.flag("causal", causal):
            p.causal = True
        if window is not None:
            left, right = _args.window(window)
            if sparse_mode is not None:
                raise ValueError("window: not combined with sparse_mode (it sets the band itself)")
            sparse_mode = "band"
            pre_tokens = UNBOUNDED if left is None or left < 0 else left
            next_tokens = 0 if causal else (UNBOUNDED if right is None or right < 0 else right)
            p.causal = False
        if sparse_mode is not None:
            mode = SPARSE_MODES.get(str(sparse_mode).lower()) if isinstance(sparse_mode, str) else sparse_mode
            if mode not in SPARSE_MODES.values():
                raise ValueError(f"sparse_mode: {sparse_mode!r} (expected one of {', '.join(SPARSE_MODES)} or 0-4)")
            p.sparse_mode = _core.SparseMode(mode)
        if pre_tokens is not None:
            _args.set_field(p, "pre_tokens", pre_tokens)
        if next_tokens is not None:
            _args.set_field(p, "next_tokens", next_tokens)
        dropout_p, softcap = _args.number("dropout_p", dropout_p), _args.number("softcap", softcap)
        if dropout_p:
            if not 0.0 <= dropout_p < 1.0:
                raise ValueError(f"dropout_p: {dropout_p} (expected 0 <= dropout_p < 1)")
            p.keep_prob = 1.0 - dropout_p
            p.dropout_seed = _args.integer("dropout_seed", dropout_seed) & ((1 << 64) - 1)
        if softcap:
            p.softcap = softcap
        if num_splits:
            _args.set_field(p, "num_splits", num_splits)
        if tile_q:
            _args.set_field(p, "tile_q", tile_q)
        if tile_kv:
            _args.set_field(p, "tile_kv", tile_kv)
        if threads:
            _args.set_field(p, "threads", threads)
        if isa is not None:
            names = {"generic": _core.Isa.GENERIC, "avx2": _core.Isa.AVX2, "avx512": _core.Isa.AVX512,
                     "avx512bf16": _core.Isa.AVX512BF16, "amx": _core.Isa.AMX}
            if isa not in names:
                raise ValueError(f"isa: '{isa}' (expected one of {', '.join(names)})")
            p.isa = names[isa]
        if async_prefetch is not None:
            p.async_prefetch = _args.flag("async_prefetch", async_prefetch)
        # The layout tells whether a token's K/V heads lie side by side (the
        # forward reads it from K's strides; a plan made without them, here).
        if layout == "BNSD":
            p.kv_heads_side_by_side = False
        self.params = p
        self.out_dtype = out_dtype or (self.q.dtype if not self.q.dtype.startswith("fp8") else "bf16")

    @property
    def varlen(self) -> bool:
        return "cu_seqlens_q" in self.arrays

    def lse_shape(self) -> Tuple[int, ...]:
        p = self.params
        return (1, p.num_heads, p.seq_q) if self.varlen else (p.batch, p.num_heads, p.seq_q)

    def forward(self, return_lse: bool, out: Any = None) -> Any:
        if out is None:
            out = _arrays.empty_like(self.q, self.q.shape, self.out_dtype)
            result = None
        else:
            result, out = out, self.checked_out(out)
        lse = _arrays.empty_like(self.q, self.lse_shape(), "fp32") if return_lse else None
        self.forward_into(out, lse)
        if result is None:
            result = _arrays.to_caller(self.q, out)
        return (result, _arrays.to_caller(self.q, lse)) if return_lse else result

    def checked_out(self, out: Any) -> Any:
        """The caller's `out` as the library writes it: q's shape and
        framework, the output's dtype."""
        if _arrays.is_torch(out) and out.is_neg():  # written through a resolved copy, it would stay unwritten
            raise TypeError("out: a negated view (pass a plain tensor)")
        array = _arrays.Array(out, "out")
        if array.kind == "dlpack":
            raise TypeError("out: a NumPy array or a PyTorch tensor expected (other frameworks' arrays are read-only here)")
        if array.kind != self.q.kind:
            raise TypeError(f"out: a {array.kind} array, expected one of q's framework ({self.q.kind})")
        if array.dtype != self.out_dtype:
            raise TypeError(f"out: dtype {array.dtype}, expected {self.out_dtype}")
        if array.shape != self.q.shape:
            raise ValueError(f"out: shape {array.shape}, expected q's {self.q.shape}")
        if array.kind == "numpy" and not out.flags.writeable:
            raise ValueError("out: a read-only array (expected one the call may write)")
        if self.q.kind == "torch" and out.requires_grad:
            raise TypeError("out: a tensor that requires grad (out= is not differentiable)")
        return array.obj

    def forward_into(self, out: Any, lse: Any) -> None:
        heads = self.params.num_heads
        ov = _arrays.logical_view(out, self.layout, heads, "out")
        _core.forward(self.version, self.params, _arrays.raw(self.qv, self.q.dtype),
                      _arrays.raw(self.kv, self.k.dtype), _arrays.raw(self.vv, self.v.dtype),
                      _arrays.raw(ov, self.out_dtype), lse, self.arrays, self.q.dtype, self.k.dtype, self.out_dtype)

    def backward(self, dout: Any, out: Any, lse: Any, grad_dtype: Optional[str], want_dbias: bool,
                 want_dsinks: bool) -> Tuple[Any, ...]:
        if self.version != 2:
            raise ValueError(f"version: {self.version} has no backward pass (FlashAttention-2's, version=2)")
        dtype = self.q.dtype
        for name, x in (("dout", dout), ("out", out)):
            if _arrays.dtype_name(_arrays.Array(x, name).obj, name) != dtype:
                raise TypeError(f"{name}: dtype differs from q's ({dtype})")
        grad = grad_dtype or dtype
        if grad not in (dtype, "fp32"):
            raise ValueError(f"grad_dtype: '{grad}' (expected q's dtype {dtype} or fp32)")
        heads, kv_heads = self.params.num_heads, self.params.num_kv_heads
        dq = _arrays.empty_like(self.q, self.q.shape, grad)
        dk = _arrays.empty_like(self.q, self.k.shape, grad)
        dv = _arrays.empty_like(self.q, self.v.shape, grad)
        dbias = dsinks = None
        if want_dbias and "bias" in self.arrays:
            dbias = _arrays.empty_like(self.q, self.arrays["bias"].shape, "fp32")
        if want_dsinks and "sinks" in self.arrays:
            dsinks = _arrays.empty_like(self.q, (heads,), "fp32")
        lse_obj = _arrays.Array(lse, "lse").obj
        _core.backward(self.params, _arrays.raw(self.qv, dtype), _arrays.raw(self.kv, dtype),
                       _arrays.raw(self.vv, dtype),
                       _arrays.raw(_arrays.logical_view(_arrays.Array(out, "out").obj, self.layout, heads, "out"), dtype),
                       lse_obj,
                       _arrays.raw(_arrays.logical_view(_arrays.Array(dout, "dout").obj, self.layout, heads, "dout"), dtype),
                       _arrays.raw(_arrays.logical_view(dq, self.layout, heads, "dq"), grad),
                       _arrays.raw(_arrays.logical_view(dk, self.layout, kv_heads, "dk"), grad),
                       _arrays.raw(_arrays.logical_view(dv, self.layout, kv_heads, "dv"), grad),
                       dbias, dsinks, self.arrays, dtype, grad)
        result = tuple(_arrays.to_caller(self.q, x) for x in (dq, dk, dv))
        if want_dbias or want_dsinks:
            result += (_arrays.to_caller(self.q, dbias) if dbias is not None else None,
                       _arrays.to_caller(self.q, dsinks) if dsinks is not None else None)
        return result

    def to_layout(self, bsnd: np.ndarray) -> np.ndarray:
        """A reference result [batch, seq, heads, dim] in this call's layout."""
        if self.layout == "BSND":
            return bsnd
        if self.layout == "BNSD":
            return np.ascontiguousarray(np.swapaxes(bsnd, 1, 2))
        if self.layout == "TND":
            return bsnd[0]
        return bsnd.reshape(bsnd.shape[0], bsnd.shape[1], -1)  # BSH


_torch_ops: Any = None  # ops_transformer.torch_ops once a call has brought PyTorch tensors


def _load_torch_ops() -> Any:
    global _torch_ops
    from . import torch_ops
    _torch_ops = torch_ops
    return torch_ops


def attention(q: Any, k: Any, v: Any, *, return_lse: bool = False, out: Any = None, **options: Any) -> Any:
    """softmax(scale * Q Kᵀ + masks and modifiers) V, by FlashAttention version
    `version` (1, 2 or 3; default 2).

    q, k, v are stored in `layout`: "BSND" ([batch, seq, heads, head_dim], the
    default, as flash-attn), "BNSD" ([batch, heads, seq, head_dim], as SDPA),
    "BSH" ([batch, seq, heads * head_dim]; give num_heads and, for GQA,
    num_kv_heads) or "TND" ([tokens, heads, head_dim] with cu_seqlens_q and
    cu_seqlens_kv).  K and V with fewer heads than Q is GQA/MQA.  Keywords:
    causal, scale, sparse_mode ("mask_and_band", "all", "causal_top_left",
    "causal_bottom_right", "band") with pre_tokens / next_tokens, window
    (left, right) as flash-attn's window_size, mask (bool or int8 [seq_q,
    seq_kv], True = may attend), sinks ([heads] logits), softcap,
    alibi_slopes ([heads]), bias (float [1 or heads, seq_q, seq_kv]),
    dropout_p with dropout_seed, cu_seqlens_q / cu_seqlens_kv, seqlens_kv,
    block_table with block_size (paged K/V), descale_q / descale_k /
    descale_v (FP8), k_scale / v_scale (int8 cache), num_splits, tile_q,
    tile_kv, threads, isa, async_prefetch, out_dtype ("fp32", "fp16" or
    "bf16" for FP8 inputs), copy (True: inputs whose head_dim is strided
    are copied; by default they are refused, as nothing is copied unasked).
    Returns the output in Q's layout and framework (written into `out`
    when given: an array of Q's shape and framework and the output dtype,
    which saves the allocation), and with return_lse=True also the
    log-sum-exp (float32 [batch, heads, seq_q]).  PyTorch tensors that need
    gradients go through the autograd operator (not with `out`).
    """
    # The everyday call (NumPy arrays, or tensors that need no gradient, with
    # the common keywords) in one crossing into the extension, which answers
    # None for anything else: the general path below.  Each step here runs
    # with cold caches after a long call, so the checks are as few as can be.
    if type(q) is np.ndarray:
        result = _core.attention_direct(q, k, v, return_lse, out, options)
        if result is not None:
            return result
    elif _torch_ops is not None or _arrays.is_torch(q):
        torch_ops = _torch_ops or _load_torch_ops()
        if not torch_ops.compiling():  # torch.compile traces the operator, never the extension
            result = _core.attention_direct(q, k, v, return_lse, out, options)
            if result is not None:
                return result
        if _arrays.is_torch(q) and torch_ops.wants_autograd_op(q, k, v, options):
            return torch_ops.attention_into(q, k, v, _args.flag("return_lse", return_lse), out, options)
    return Call(q, k, v, **options).forward(_args.flag("return_lse", return_lse), out)


def attention_backward(dout: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, *, grad_dtype: Optional[str] = None,
                       return_aux_grads: bool = False, **options: Any) -> Tuple[Any, ...]:
    """FlashAttention-2's backward pass: (dq, dk, dv) of the forward call
    `attention(q, k, v, **options)` that gave `out` and `lse`, given dO.
    Gradients are in the inputs' dtype, or fp32 with grad_dtype="fp32";
    with return_aux_grads=True also (dbias, dsinks) (None where the call has
    no bias or sinks).  Deterministic: the same bits on every run and thread
    count."""
    call = Call(q, k, v, **options)
    return_aux_grads = _args.flag("return_aux_grads", return_aux_grads)
    return call.backward(dout, out, lse, grad_dtype, return_aux_grads, return_aux_grads)


def reference_forward(q: Any, k: Any, v: Any, *, return_lse: bool = False, **options: Any) -> Any:
    """The float64 reference of `attention` (a whole score row at a time),
    as float64 arrays in Q's layout and framework."""
    call = Call(q, k, v, **options)
    return_lse = _args.flag("return_lse", return_lse)
    out, lse = _core.reference_forward(call.params, _arrays.raw(call.qv, call.q.dtype),
                                       _arrays.raw(call.kv, call.k.dtype), _arrays.raw(call.vv, call.v.dtype),
                                       call.arrays, call.q.dtype, call.k.dtype)
    result = _arrays.from_float64(call.q, call.to_layout(out))
    return (result, _arrays.from_float64(call.q, lse)) if return_lse else result


def reference_backward(dout: Any, q: Any, k: Any, v: Any, **options: Any) -> Tuple[Any, ...]:
    """The float64 reference gradients (dq, dk, dv, dbias or None, dsinks or
    None) of `attention(q, k, v, **options)` given dO, in Q's layout."""
    call = Call(q, k, v, **options)
    heads = call.params.num_heads
    dov = _arrays.logical_view(_arrays.Array(dout, "dout").obj, call.layout, heads, "dout")
    dq, dk, dv, dbias, dsinks = _core.reference_backward(
        call.params, _arrays.raw(call.qv, call.q.dtype), _arrays.raw(call.kv, call.k.dtype),
        _arrays.raw(call.vv, call.v.dtype), _arrays.raw(dov, call.q.dtype), call.arrays, call.q.dtype)
    grads = [_arrays.from_float64(call.q, call.to_layout(g)) for g in (dq, dk, dv)]
    extra = [None if g is None else _arrays.from_float64(call.q, g) for g in (dbias, dsinks)]
    return tuple(grads + extra)


def plan(q: Any, k: Any, v: Any, **options: Any) -> Dict[str, Any]:
    """The tiles, threads, splits and work items the forward call
    `attention(q, k, v, **options)` would use, checked against the CPU's
    caches (a plan that does not fit raises ValueError with the usage and a
    tile that fits).  q, k and v may be empty arrays of the right shapes."""
    call = Call(q, k, v, **options)
    return _core.plan(call.version, call.params, call.q.dtype, call.k.dtype, call.arrays)
