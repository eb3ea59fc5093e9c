"""LayerNorm / RMSNorm, RoPE and the gated linear units from Python, against
their float64 references (and PyTorch's own where it is installed)."""

import numpy as np
import pytest

import ops_transformer as ot
from conftest import REL_L2, numpy_dtype, randn, rel_l2

# Element-wise results are one rounding from exact: the output dtype's.
BOUND = {"fp32": 1e-6, "fp16": 1e-3, "bf16": 8e-3}


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_norms_match_reference(rng, dtype):
    x = randn(rng, (3, 17, 200), dtype)
    w = rng.standard_normal(200).astype(np.float32)
    b = rng.standard_normal(200).astype(np.float32)
    y, mean, rstd = ot.layer_norm(x, w, b, return_stats=True)
    assert y.dtype == x.dtype and y.shape == x.shape and mean.shape == rstd.shape == (3, 17)
    assert rel_l2(y, ot.norm_reference("layer_norm", x, w, b)) <= BOUND[dtype]
    x64 = x.astype(np.float64)
    assert np.allclose(mean, x64.mean(-1), rtol=1e-5, atol=1e-5)
    assert np.allclose(rstd, 1 / np.sqrt(x64.var(-1) + 1e-5), rtol=1e-4)
    y = ot.rms_norm(x, w)
    assert rel_l2(y, ot.norm_reference("rms_norm", x, w)) <= BOUND[dtype]


def test_layer_norm_statistics_survive_a_large_mean(rng):
    """1e4 + small noise: E[x^2] - E[x]^2 would lose the variance to
    cancellation in fp32; the two-pass statistics keep it."""
    x = (1e4 + rng.standard_normal((8, 1024)) * 1e-2).astype(np.float32)
    y = ot.layer_norm(x)
    assert rel_l2(y, ot.norm_reference("layer_norm", x)) <= 1e-3


def test_fused_residual_equals_two_calls(rng):
    x = randn(rng, (64, 256), "bf16")
    r = randn(rng, (64, 256), "bf16")
    w = randn(rng, (256,), "bf16")
    y, total = ot.rms_norm(x, w, residual=r)
    assert np.array_equal(total.view(np.uint16), (x.astype(np.float32) + r.astype(np.float32)).astype(x.dtype).view(np.uint16))
    assert np.array_equal(y.view(np.uint16), ot.rms_norm(total, w).view(np.uint16))


@pytest.mark.parametrize("layout", ["BSND", "BNSD", "BSH"])
@pytest.mark.parametrize("mode", ["rotate_half", "interleaved"])
def test_rope_matches_reference(rng, layout, mode):
    q = randn(rng, (2, 9, 4, 64), "bf16")
    k = randn(rng, (2, 9, 2, 64), "bf16")
    if layout == "BNSD":
        q, k = np.ascontiguousarray(q.swapaxes(1, 2)), np.ascontiguousarray(k.swapaxes(1, 2))
    elif layout == "BSH":
        q, k = q.reshape(2, 9, -1), k.reshape(2, 9, -1)
    options = dict(layout=layout, mode=mode, rotary_dim=48, base=500000.0, scaling="llama3", factor=8.0,
                   positions=rng.integers(0, 100000, (2, 9)), num_heads=4, num_kv_heads=2)
    qo, ko = ot.rope(q, k, **options)
    qr, kr = ot.rope_reference(q, k, **options)
    assert qo.shape == q.shape and ko.shape == k.shape
    assert rel_l2(qo, qr) <= BOUND["bf16"] and rel_l2(ko, kr) <= BOUND["bf16"]
    q2, _ = ot.rope(q.copy(), None, **options)
    assert np.array_equal(q2.view(np.uint16), qo.view(np.uint16))  # K absent: Q alone, same bits
    inplace = q.copy()
    ot.rope(inplace, None, inplace=True, **options)
    assert np.array_equal(inplace.view(np.uint16), qo.view(np.uint16))


@pytest.mark.parametrize("kind", ["swiglu", "geglu", "geglu_tanh", "reglu"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_glu_matches_reference(rng, kind, dtype):
    x = randn(rng, (5, 7, 96), dtype, scale=3.0)
    for split in ("gate_first", "up_first"):
        y = ot.glu(x, kind, split=split)
        assert y.shape == (5, 7, 48) and y.dtype == x.dtype
        assert rel_l2(y, ot.glu_reference(x, kind, split=split)) <= BOUND[dtype]


def test_bad_arguments(rng):
    x = randn(rng, (4, 32))
    with pytest.raises(ValueError, match="eps"):
        ot.layer_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="weight"):
        ot.rms_norm(x, np.ones(31, np.float32))
    with pytest.raises(ValueError, match="odd"):
        ot.swiglu(x[:, :31])
    with pytest.raises(ValueError, match="kind"):
        ot.glu(x, "tanhglu")
    with pytest.raises(ValueError, match="mode"):
        ot.rope(x.reshape(1, 4, 1, 32), mode="sideways")
    with pytest.raises(ValueError, match="without a copy"):
        ot.layer_norm(randn(rng, (4, 6, 32)).swapaxes(0, 1))
    # Keywords of the wrong type name themselves in one line.
    head = x.reshape(1, 4, 1, 32)
    for call, error, pattern in ((lambda: ot.layer_norm(x, eps="x"), TypeError, "^eps: expected a number"),
                                 (lambda: ot.rms_norm(x, threads="2"), TypeError, "^threads: expected an integer"),
                                 (lambda: ot.rms_norm(x, out_dtype="fp64"), ValueError, "^out_dtype: 'fp64'"),
                                 (lambda: ot.glu(x, threads=1.0), TypeError, "^threads: expected an integer"),
                                 (lambda: ot.rope(head, base="x"), TypeError, "^base: expected a number"),
                                 (lambda: ot.rope(head, rotary_dim="a"), TypeError, "^rotary_dim: expected an integer"),
                                 (lambda: ot.rope(head, layout=0), TypeError, "^layout: expected a string")):
        with pytest.raises(error, match=pattern) as info:
            call()
        assert "\n" not in str(info.value)
    # An in-place rotation of a read-only array is refused, the array unwritten.
    frozen = head.copy()
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="^q: a read-only array cannot be rotated in place"):
        ot.rope(frozen, inplace=True)
    assert np.array_equal(frozen, head)


def test_operators_on_torch_tensors_match_pytorch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = torch.randn(6, 10, 128)
    w, b = torch.randn(128), torch.randn(128)
    assert torch.allclose(ot.layer_norm(x, w, b), F.layer_norm(x, (128,), w, b), atol=1e-5)
    assert torch.allclose(ot.rms_norm(x, w), F.rms_norm(x, (128,), w, eps=1e-6), atol=1e-5)
    g, u = x.chunk(2, dim=-1)
    assert torch.allclose(ot.swiglu(x), F.silu(g) * u, atol=1e-6)
    assert torch.allclose(ot.geglu(x), F.gelu(g) * u, atol=1e-6)
    assert torch.allclose(ot.geglu(x, "tanh"), F.gelu(g, approximate="tanh") * u, atol=1e-6)
    assert isinstance(ot.reglu(x), torch.Tensor)
