"""
The library's C++ API (ops_transformer's low-level layer; use the functions of ops_transformer).
"""

import enum
from typing import Annotated, overload

import numpy
from numpy.typing import NDArray


class SparseMode(enum.Enum):
    MASK_AND_BAND = 0

    ALL = 1

    CAUSAL_TOP_LEFT = 2

    CAUSAL_BOTTOM_RIGHT = 3

    BAND = 4

class Isa(enum.Enum):
    GENERIC = 0

    AVX2 = 1

    AVX512 = 2

    AVX512BF16 = 3

    AMX = 4

class AttentionParams:
    @overload
    def __init__(self) -> None: ...

    @overload
    def __init__(self, batch: int, seq_q: int, seq_kv: int, num_heads: int, num_kv_heads: int, head_dim: int) -> None: ...

    @property
    def batch(self) -> int: ...

    @batch.setter
    def batch(self, arg: int, /) -> None: ...

    @property
    def seq_q(self) -> int: ...

    @seq_q.setter
    def seq_q(self, arg: int, /) -> None: ...

    @property
    def seq_kv(self) -> int: ...

    @seq_kv.setter
    def seq_kv(self, arg: int, /) -> None: ...

    @property
    def num_heads(self) -> int: ...

    @num_heads.setter
    def num_heads(self, arg: int, /) -> None: ...

    @property
    def num_kv_heads(self) -> int: ...

    @num_kv_heads.setter
    def num_kv_heads(self, arg: int, /) -> None: ...

    @property
    def head_dim(self) -> int: ...

    @head_dim.setter
    def head_dim(self, arg: int, /) -> None: ...

    @property
    def scale(self) -> float | None: ...

    @scale.setter
    def scale(self, scale: float | None) -> None: ...

    @property
    def causal(self) -> bool: ...

    @causal.setter
    def causal(self, arg: bool, /) -> None: ...

    @property
    def sparse_mode(self) -> SparseMode | None: ...

    @sparse_mode.setter
    def sparse_mode(self, sparse_mode: SparseMode | None) -> None: ...

    @property
    def pre_tokens(self) -> int: ...

    @pre_tokens.setter
    def pre_tokens(self, arg: int, /) -> None: ...

    @property
    def next_tokens(self) -> int: ...

    @next_tokens.setter
    def next_tokens(self, arg: int, /) -> None: ...

    @property
    def block_size(self) -> int: ...

    @block_size.setter
    def block_size(self, arg: int, /) -> None: ...

    @property
    def kv_num_blocks(self) -> int: ...

    @kv_num_blocks.setter
    def kv_num_blocks(self, arg: int, /) -> None: ...

    @property
    def softcap(self) -> float: ...

    @softcap.setter
    def softcap(self, arg: float, /) -> None: ...

    @property
    def keep_prob(self) -> float: ...

    @keep_prob.setter
    def keep_prob(self, arg: float, /) -> None: ...

    @property
    def dropout_seed(self) -> int: ...

    @dropout_seed.setter
    def dropout_seed(self, arg: int, /) -> None: ...

    @property
    def threads(self) -> int: ...

    @threads.setter
    def threads(self, arg: int, /) -> None: ...

    @property
    def tile_q(self) -> int: ...

    @tile_q.setter
    def tile_q(self, arg: int, /) -> None: ...

    @property
    def tile_kv(self) -> int: ...

    @tile_kv.setter
    def tile_kv(self, arg: int, /) -> None: ...

    @property
    def num_splits(self) -> int: ...

    @num_splits.setter
    def num_splits(self, arg: int, /) -> None: ...

    @property
    def kv_heads_side_by_side(self) -> bool: ...

    @kv_heads_side_by_side.setter
    def kv_heads_side_by_side(self, arg: bool, /) -> None: ...

    @property
    def isa(self) -> Isa | None: ...

    @isa.setter
    def isa(self, isa: Isa | None) -> None: ...

    @property
    def async_prefetch(self) -> bool | None: ...

    @async_prefetch.setter
    def async_prefetch(self, async_prefetch: bool | None) -> None: ...

def forward(version: int, params: AttentionParams, q: Annotated[NDArray, dict(device='cpu', writable=False)], k: Annotated[NDArray, dict(device='cpu', writable=False)], v: Annotated[NDArray, dict(device='cpu', writable=False)], out: Annotated[NDArray, dict(device='cpu')], lse: Annotated[NDArray, dict(device='cpu')] | None, arrays: dict, q_dtype: str, kv_dtype: str, out_dtype: str) -> None:
    """
    Runs version's forward pass into `out` (and `lse`); views are [batch, heads, seq, head_dim].
    """

def time_forward(version: int, params: AttentionParams, q: Annotated[NDArray, dict(device='cpu', writable=False)], k: Annotated[NDArray, dict(device='cpu', writable=False)], v: Annotated[NDArray, dict(device='cpu', writable=False)], out: Annotated[NDArray, dict(device='cpu')], lse: Annotated[NDArray, dict(device='cpu')] | None, arrays: dict, q_dtype: str, kv_dtype: str, out_dtype: str, runs: int) -> list[float]:
    """
    forward()'s call `runs` times in a C++ loop: each call's seconds (the library's own latency).
    """

def last_forward_seconds() -> float:
    """
    Seconds the library spent in this thread's last forward call (timed in C++ around the entry point).
    """

def backward(params: AttentionParams, q: Annotated[NDArray, dict(device='cpu', writable=False)], k: Annotated[NDArray, dict(device='cpu', writable=False)], v: Annotated[NDArray, dict(device='cpu', writable=False)], out: Annotated[NDArray, dict(device='cpu', writable=False)], lse: Annotated[NDArray, dict(device='cpu')], dout: Annotated[NDArray, dict(device='cpu', writable=False)], dq: Annotated[NDArray, dict(device='cpu')], dk: Annotated[NDArray, dict(device='cpu')], dv: Annotated[NDArray, dict(device='cpu')], dbias: Annotated[NDArray, dict(device='cpu')] | None, dsinks: Annotated[NDArray, dict(device='cpu')] | None, arrays: dict, dtype: str, grad_dtype: str) -> None:
    """FlashAttention-2's backward pass into dq, dk, dv (and dbias, dsinks)."""

def reference_forward(params: AttentionParams, q: Annotated[NDArray, dict(device='cpu', writable=False)], k: Annotated[NDArray, dict(device='cpu', writable=False)], v: Annotated[NDArray, dict(device='cpu', writable=False)], arrays: dict, q_dtype: str, kv_dtype: str) -> tuple[NDArray[numpy.float64], NDArray[numpy.float64]]:
    """
    The float64 reference: (out [batch, seq_q, heads, head_dim], lse [batch, heads, seq_q]).
    """

def reference_backward(params: AttentionParams, q: Annotated[NDArray, dict(device='cpu', writable=False)], k: Annotated[NDArray, dict(device='cpu', writable=False)], v: Annotated[NDArray, dict(device='cpu', writable=False)], dout: Annotated[NDArray, dict(device='cpu', writable=False)], arrays: dict, dtype: str) -> tuple:
    """
    The float64 reference gradients: (dq, dk, dv in [batch, seq, heads, head_dim], dbias or None, dsinks or None).
    """

def plan(version: int, params: AttentionParams, dtype: str, kv_dtype: str, arrays: dict) -> dict:
    """The tile plan the forward pass would use, as a dict."""

def available_isas() -> list[str]:
    """Kernel paths this build and CPU can run, slowest first."""

def built_isas() -> str:
    """Kernel paths compiled into this build."""

def cpu_features() -> str:
    """The instruction-set features the library detected on this CPU."""

def default_thread_count() -> int:
    """Threads a call with threads=0 uses."""

def norm(kind: str, x: Annotated[NDArray, dict(device='cpu', writable=False)], x_dtype: str, out: Annotated[NDArray, dict(device='cpu')], out_dtype: str, residual: Annotated[NDArray, dict(device='cpu', writable=False)] | None, sum: Annotated[NDArray, dict(device='cpu')] | None, weight: Annotated[NDArray, dict(device='cpu', writable=False)] | None, bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, param_dtype: str, mean: Annotated[NDArray, dict(device='cpu')] | None, rstd: Annotated[NDArray, dict(device='cpu')] | None, eps: float | None, threads: int, isa: str | None) -> None:
    """
    LayerNorm or RMSNorm of x [rows, hidden] into out (the residual added first).
    """

def norm_reference(kind: str, x: Annotated[NDArray, dict(device='cpu', writable=False)], x_dtype: str, residual: Annotated[NDArray, dict(device='cpu', writable=False)] | None, weight: Annotated[NDArray, dict(device='cpu', writable=False)] | None, bias: Annotated[NDArray, dict(device='cpu', writable=False)] | None, param_dtype: str, eps: float | None) -> NDArray[numpy.float64]:
    """The float64 reference of norm: y [rows, hidden]."""

def rope(q: Annotated[NDArray, dict(device='cpu', writable=False)] | None, k: Annotated[NDArray, dict(device='cpu', writable=False)] | None, q_out: Annotated[NDArray, dict(device='cpu')] | None, k_out: Annotated[NDArray, dict(device='cpu')] | None, dtype: str, out_dtype: str, mode: str, rotary_dim: int, base: float, scaling: str, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_position: float, positions: Annotated[NDArray, dict(device='cpu', writable=False)] | None, cos: Annotated[NDArray, dict(device='cpu', writable=False)] | None, sin: Annotated[NDArray, dict(device='cpu', writable=False)] | None, cu_seqlens: Annotated[NDArray, dict(device='cpu', writable=False)] | None, threads: int, isa: str | None) -> None:
    """Rotary position embedding of q and k ([batch, heads, seq, dim] views)."""

def rope_reference(q: Annotated[NDArray, dict(device='cpu', writable=False)] | None, k: Annotated[NDArray, dict(device='cpu', writable=False)] | None, dtype: str, mode: str, rotary_dim: int, base: float, scaling: str, factor: float, low_freq_factor: float, high_freq_factor: float, original_max_position: float, positions: Annotated[NDArray, dict(device='cpu', writable=False)] | None, cos: Annotated[NDArray, dict(device='cpu', writable=False)] | None, sin: Annotated[NDArray, dict(device='cpu', writable=False)] | None, cu_seqlens: Annotated[NDArray, dict(device='cpu', writable=False)] | None) -> tuple:
    """
    The float64 reference of rope: (q, k) [batch, heads, seq, dim] or None.
    """

def glu(kind: str, x: Annotated[NDArray, dict(device='cpu', writable=False)], x_dtype: str, out: Annotated[NDArray, dict(device='cpu')], out_dtype: str, split: str, threads: int, isa: str | None) -> None:
    """A gated linear unit of x [rows, 2d] into out [rows, d]."""

def glu_reference(kind: str, x: Annotated[NDArray, dict(device='cpu', writable=False)], x_dtype: str, split: str) -> NDArray[numpy.float64]:
    """The float64 reference of glu: y [rows, d]."""

has_layer_norm: bool = True

has_rope: bool = True

has_glu: bool = True

def set_numpy_fast_path(dtypes: dict) -> None:
    """
    Enables attention_direct on NumPy arrays of these dtypes (dtype -> 'fp32', 'fp16' or 'bf16').
    """

def set_torch_fast_path(tensor_type: object, to_dlpack: object, from_dlpack: object, use_exchange: bool = True) -> None:
    """
    Enables attention_direct on plain CPU tensors (torch.Tensor and its DLPack converters; with use_exchange, its DLPack C exchange table where the type has one).
    """

def torch_fast_path_exchange() -> bool:
    """
    Whether attention_direct reaches PyTorch through its DLPack C exchange table.
    """

def attention_direct(q: object, k: object, v: object, return_lse: object, out: object | None, options: dict) -> object:
    """
    ops_transformer.attention's everyday call in one crossing, or None where the general path must take it.
    """

def select_isa(params: AttentionParams) -> str:
    """The kernel path a forward call with these parameters would run."""
