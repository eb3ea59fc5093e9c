"""PyTorch custom operators: ``ops_transformer::attention`` and its backward.

Registered with ``torch.library.custom_op`` (PyTorch 2.4 and later), each
with a fake (meta) implementation, so ``torch.compile`` traces through them,
and with autograd through FlashAttention-2's backward pass.  Tensors travel
in the layout the caller gave (BSND, BNSD, BSH or TND); everything else is a
scalar or an optional tensor of the schema.  Calls with inference-only
features (paged or per-sequence K/V, FP8 descales, int8 cache scales) do not
come here, nor calls that need no gradient outside torch.compile:
ops_transformer.attention runs those directly.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils.dlpack

from . import _attention
from . import _core

_TENSOR_OPTIONS = ("mask", "bias", "alibi_slopes", "sinks", "cu_seqlens_q", "cu_seqlens_kv")
_SCALAR_DEFAULTS: Dict[str, Any] = {
    "layout": "BSND", "version": 2, "causal": False, "scale": None, "sparse_mode": None, "pre_tokens": None,
    "next_tokens": None, "window": None, "softcap": 0.0, "dropout_p": 0.0, "dropout_seed": 0, "num_heads": None,
    "num_kv_heads": None, "num_splits": 0, "tile_q": 0, "tile_kv": 0, "threads": 0, "isa": None,
    "async_prefetch": None, "out_dtype": None, "copy": False,
}


# Whether torch.compile (dynamo) is tracing this call: the one-crossing call
# must not run then, as dynamo cannot trace into the extension.  Dynamo
# answers True for is_dynamo_compiling as it traces; the function itself is
# cheaper than is_compiling (no TorchScript check).  Other tracers hand over
# tensor subclasses, which the one-crossing call declines by type.
compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


def enable_fast_path(use_exchange: bool = True) -> bool:
    """Plain CPU tensors that need no gradient go to the library in one
    crossing (_core.attention_direct) when torch.compile is not tracing the
    call.  The extension reads and makes tensors through DLPack's C exchange
    table where this PyTorch has one (recent releases; use_exchange=False
    takes the older route, which the tests also run), otherwise through
    to_dlpack and a capsule import.  Returns whether the table is used.
    (torch._C._from_dlpack is what torch.utils.dlpack.from_dlpack calls on a
    capsule, without its Python frame; the public function where it is gone.)"""
    _core.set_torch_fast_path(torch.Tensor, torch.utils.dlpack.to_dlpack,
                              getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack), use_exchange)
    return _core.torch_fast_path_exchange()


enable_fast_path()


def wants_autograd_op(q: Any, k: Any, v: Any, options: Dict[str, Any]) -> bool:
    """Whether a call on torch tensors goes through the operator: when
    torch.compile traces it, or when a gradient may be asked of q, k, v, the
    bias or the sinks; not with inference-only features.  Other calls run
    the library directly, without the dispatcher's cost."""
    if any(options.get(name) is not None for name in _attention.INFERENCE_ONLY):
        return False
    if torch.compiler.is_compiling():
        return True
    return _needs_grad(q, k, v, options)


def _needs_grad(q: Any, k: Any, v: Any, options: Dict[str, Any]) -> bool:
    """Whether autograd may ask a gradient of q, k, v, the bias or the sinks."""
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(t, torch.Tensor) and t.requires_grad
               for t in (q, k, v, options.get("bias"), options.get("sinks")))


def _encode(options: Dict[str, Any]) -> Tuple[List[Optional[torch.Tensor]], str]:
    """Options as the schema carries them: the optional tensors, and the
    scalars as one JSON string (the schema stays short and stable as
    options are added)."""
    unknown = set(options) - set(_SCALAR_DEFAULTS) - set(_TENSOR_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    tensors = [options.get(name) for name in _TENSOR_OPTIONS]
    for i, (name, t) in enumerate(zip(_TENSOR_OPTIONS, tensors)):
        if t is not None and not isinstance(t, torch.Tensor):
            tensors[i] = torch.as_tensor(t)
    scalars = tuple((name, options.get(name, default)) for name, default in _SCALAR_DEFAULTS.items())
    return tensors, _scalars_json(scalars)


@torch.compiler.assume_constant_result
def _scalars_json(scalars: Tuple[Tuple[str, Any], ...]) -> str:
    # Run once when torch.compile traces a call (the scalars are constants of
    # the traced frame, guarded like any other), not traced itself.
    return json.dumps(dict(scalars))


def _decode(tensors: List[Optional[torch.Tensor]], scalars: str) -> Dict[str, Any]:
    options = dict(_SCALAR_DEFAULTS)
    options.update(json.loads(scalars))
    for name, t in zip(_TENSOR_OPTIONS, tensors):
        if t is not None:
            options[name] = t.detach()
    return options


@torch.library.custom_op("ops_transformer::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                  bias: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor],
                  cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_kv: Optional[torch.Tensor],
                  options: str) -> Tuple[torch.Tensor, torch.Tensor]:
    call = _attention.Call(q.detach(), k.detach(), v.detach(),
                           **_decode([mask, bias, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_kv], options))
    return call.forward(return_lse=True)


@_attention_op.register_fake
def _attention_fake(q, k, v, mask, bias, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_kv, options):
    opts = _decode([None] * len(_TENSOR_OPTIONS), options)
    layout = opts["layout"].upper()
    heads = q.shape[2] if layout in ("BSND",) else q.shape[1] if layout in ("BNSD", "TND") else opts["num_heads"]
    if layout == "TND":
        lse_shape = (1, heads, q.shape[0])
    elif layout == "BNSD":
        lse_shape = (q.shape[0], heads, q.shape[2])
    else:
        lse_shape = (q.shape[0], heads, q.shape[1])
    out_dtype = q.dtype
    if opts.get("out_dtype"):
        out_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[opts["out_dtype"]]
    return q.new_empty(q.shape, dtype=out_dtype), q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("ops_transformer::attention_backward", mutates_args=())
def _attention_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           out: torch.Tensor, lse: torch.Tensor, mask: Optional[torch.Tensor],
                           bias: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                           sinks: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                           cu_seqlens_kv: Optional[torch.Tensor], options: str
                           ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    call = _attention.Call(q, k, v, **_decode([mask, bias, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_kv], options))
    dq, dk, dv, dbias, dsinks = call.backward(dout.contiguous(), out, lse, None, True, True)
    # Absent gradients as empty tensors (the schema's outputs are all tensors, none aliased).
    if dbias is None:
        dbias = q.new_empty((0,), dtype=torch.float32)
    if dsinks is None:
        dsinks = q.new_empty((0,), dtype=torch.float32)
    return dq, dk, dv, dbias, dsinks


@_attention_backward_op.register_fake
def _attention_backward_fake(dout, q, k, v, out, lse, mask, bias, alibi_slopes, sinks, cu_seqlens_q,
                             cu_seqlens_kv, options):
    dbias = bias.new_empty(bias.shape if bias.dim() == 3 else (1,) + tuple(bias.shape), dtype=torch.float32) \
        if bias is not None else q.new_empty((0,), dtype=torch.float32)
    dsinks = sinks.new_empty(sinks.shape, dtype=torch.float32) if sinks is not None \
        else q.new_empty((0,), dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dbias, dsinks


def _setup_context(ctx, inputs, output):
    q, k, v, mask, bias, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_kv, options = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, bias, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_kv)
    ctx.options = options
    ctx.mark_non_differentiable(lse)  # the LSE is an output for inspection; no gradient flows through it
    ctx.bias_shape = None if bias is None else tuple(bias.shape)
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.sinks_dtype = None if sinks is None else sinks.dtype


def _backward(ctx, dout, dlse):
    q, k, v, out, lse, mask, bias, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_kv = ctx.saved_tensors
    dq, dk, dv, dbias, dsinks = _attention_backward_op(dout, q, k, v, out, lse, mask, bias, alibi_slopes, sinks,
                                                       cu_seqlens_q, cu_seqlens_kv, ctx.options)
    grad_bias = dbias.reshape(ctx.bias_shape).to(ctx.bias_dtype) if ctx.bias_shape is not None else None
    grad_sinks = dsinks.to(ctx.sinks_dtype) if ctx.sinks_dtype is not None else None
    return dq, dk, dv, None, grad_bias, None, grad_sinks, None, None, None


_attention_op.register_autograd(_backward, setup_context=_setup_context)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, return_lse: bool = False,
              **options: Any) -> Any:
    """ops_transformer.attention on torch tensors, through the operator."""
    tensors, encoded = _encode(options)
    out, lse = _attention_op(q, k, v, *tensors, encoded)
    return (out, lse) if return_lse else out


def attention_into(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, return_lse: bool, out: Optional[torch.Tensor],
                   options: Dict[str, Any]) -> Any:
    """attention() through the operator, its result copied into `out` where
    one is given (torch.compile traces the copy; a call that needs a
    gradient refuses `out`, as PyTorch's own out= arguments do)."""
    if out is None:
        return attention(q, k, v, return_lse=return_lse, **options)
    if _needs_grad(q, k, v, options):
        raise TypeError("out: not with tensors that need a gradient (out= is not differentiable)")
    result = attention(q, k, v, return_lse=return_lse, **options)
    value = result[0] if return_lse else result
    if not isinstance(out, torch.Tensor) or out.dtype != value.dtype or tuple(out.shape) != tuple(value.shape):
        raise TypeError(f"out: expected a {value.dtype} tensor of shape {tuple(value.shape)}")
    out.copy_(value)
    return (out, result[1]) if return_lse else out
