"""Drop-in signatures: flash-attn's ``flash_attn_func`` and
``flash_attn_varlen_func``, and PyTorch's ``scaled_dot_product_attention``.

Code written for them moves over by changing an import.  The semantics are
theirs: flash-attn's causal mask and window align bottom-right (query i sees
keys up to i + seq_kv - seq_q); SDPA's ``is_causal`` aligns top-left, its
boolean ``attn_mask`` says where attention may go and a float one is added to
the scores.  What the library cannot express is refused with a ValueError
naming the argument (a mask that differs between batch entries, say).
"""

from __future__ import annotations

import random
from typing import Any, Optional, Tuple

from . import _args
from ._attention import attention


def _seed(dropout_p: float, generator: Any = None) -> int:
    """A fresh dropout seed (drawn from torch's generator when torch is in
    use, so torch.manual_seed makes runs repeatable)."""
    if _args.number("dropout_p", dropout_p) <= 0.0:
        return 0
    try:
        import torch
        return int(torch.randint(0, 2**62, (1,), generator=generator).item())
    except ImportError:
        return random.getrandbits(62)


def _window(window_size: Any) -> Optional[Tuple[Any, Any]]:
    """flash-attn's window_size, (-1, -1) for none."""
    window = _args.window(window_size)
    return None if window == (-1, -1) else window


def flash_attn_func(q: Any, k: Any, v: Any, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Any = None, deterministic: bool = False, return_attn_probs: bool = False) -> Any:
    """flash_attn.flash_attn_func: q [batch, seq_q, heads, head_dim], k and v
    [batch, seq_kv, kv_heads, head_dim].  Returns out, or with
    return_attn_probs=True (out, softmax_lse, None): the probabilities
    themselves are never formed.  `deterministic` is accepted for
    compatibility: the backward pass is always deterministic here."""
    window = _window(window_size)
    result = attention(q, k, v, layout="BSND", causal=causal, scale=softmax_scale, window=window, softcap=softcap,
                       alibi_slopes=alibi_slopes, dropout_p=dropout_p, dropout_seed=_seed(dropout_p),
                       return_lse=return_attn_probs)
    return (result[0], result[1], None) if return_attn_probs else result


def flash_attn_varlen_func(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                           max_seqlen_k: int, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                           causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Any = None, deterministic: bool = False,
                           return_attn_probs: bool = False) -> Any:
    """flash_attn.flash_attn_varlen_func: q [total_q, heads, head_dim], k and
    v [total_k, kv_heads, head_dim], sequences packed without padding and
    delimited by cu_seqlens (int32 [batch + 1]).  max_seqlen_q / max_seqlen_k
    are accepted for compatibility (the library reads the lengths)."""
    window = _window(window_size)
    result = attention(q, k, v, layout="TND", cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_k,
                       causal=causal, scale=softmax_scale, window=window, softcap=softcap,
                       alibi_slopes=alibi_slopes, dropout_p=dropout_p, dropout_seed=_seed(dropout_p),
                       return_lse=return_attn_probs)
    return (result[0], result[1], None) if return_attn_probs else result


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Any:
    """torch.nn.functional.scaled_dot_product_attention: [batch, heads, seq,
    head_dim].  attn_mask: boolean (True = may attend) or float (added to the
    scores), shaped [seq_q, seq_kv] or broadcast from it over batch and heads
    (a float mask may also differ per head: [1, heads, seq_q, seq_kv])."""
    is_causal, enable_gqa = _args.flag("is_causal", is_causal), _args.flag("enable_gqa", enable_gqa)
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if heads != kv_heads and not enable_gqa:
        raise ValueError(f"key: {kv_heads} heads where query has {heads} (pass enable_gqa=True for GQA)")
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask: not combined with is_causal (as in PyTorch)")
    options: dict = {}
    if is_causal:
        options["sparse_mode"] = "causal_top_left"
    if attn_mask is not None:
        dims = tuple(attn_mask.shape)
        seq = dims[-2:]
        lead = dims[:-2]
        is_bool = str(getattr(attn_mask, "dtype", "")) in ("bool", "torch.bool")
        if is_bool:
            if any(n != 1 for n in lead):
                raise ValueError(f"attn_mask: boolean shape {dims}; a mask shared by every batch entry and head "
                                 "([seq_q, seq_kv] or with leading 1s) is supported")
            options["mask"] = attn_mask.reshape(seq)
        else:
            if any(n != 1 for n in lead[:-1]) or (lead and lead[-1] not in (1, heads)):
                raise ValueError(f"attn_mask: float shape {dims}; [seq_q, seq_kv], [1 or heads, seq_q, seq_kv] "
                                 "or with a leading 1 are supported")
            options["bias"] = attn_mask.reshape((lead[-1] if lead else 1,) + seq)
    return attention(query, key, value, layout="BNSD", scale=scale, dropout_p=dropout_p,
                     dropout_seed=_seed(dropout_p), **options)
