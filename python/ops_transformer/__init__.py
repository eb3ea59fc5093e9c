"""ops_transformer: the library's Transformer operators from Python.

FlashAttention's forward pass in its three versions and FlashAttention-2's
backward pass, LayerNorm and RMSNorm, RoPE and the gated linear units, on
NumPy arrays and on any DLPack tensor (PyTorch, JAX)
without copies, with the C++ library's every feature by keyword::

    import ops_transformer as ot
    out = ot.attention(q, k, v, causal=True)                 # [batch, seq, heads, dim]
    out = ot.flash_attn_func(q, k, v, causal=True)           # flash-attn's signature
    out = ot.scaled_dot_product_attention(q, k, v, is_causal=True)  # PyTorch's

PyTorch tensors go through the custom operator ops_transformer::attention,
with autograd and torch.compile support (ops_transformer.torch_ops).
"""

from ._core import available_isas, built_isas, cpu_features, default_thread_count
from ._attention import attention, attention_backward, plan, reference_backward, reference_forward
from .compat import flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention
from .operators import (geglu, glu, glu_reference, layer_norm, norm_reference, reglu, rms_norm, rope,
                        rope_reference, swiglu)

__version__ = "0.1.0"

__all__ = [
    "attention", "attention_backward", "available_isas", "built_isas", "cpu_features", "default_thread_count",
    "flash_attn_func", "flash_attn_varlen_func", "plan", "reference_backward", "reference_forward",
    "scaled_dot_product_attention", "layer_norm", "rms_norm", "norm_reference", "rope", "rope_reference", "glu",
    "swiglu", "geglu", "reglu", "glu_reference",
]
