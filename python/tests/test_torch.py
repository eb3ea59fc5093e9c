"""ops_transformer on PyTorch tensors: the custom operator (schema, fake
implementation, autograd), against PyTorch's own attention, gradcheck,
torch.compile, and the drop-in signatures."""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import ops_transformer as ot  # noqa: E402
from ops_transformer import torch_ops  # noqa: E402


@pytest.fixture(autouse=True)
def seeded(rng):
    torch.manual_seed(int(rng.integers(0, 2**31)))


def sdpa_bsnd(q, k, v, **kwargs):
    """PyTorch's SDPA on [batch, seq, heads, dim] tensors, GQA expanded."""
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          **kwargs).transpose(1, 2)


def bottom_right_causal(sq, skv):
    return torch.ones(sq, skv, dtype=torch.bool).tril(skv - sq)


def leaves(*shapes, dtype=torch.float32):
    return [torch.randn(*s, dtype=dtype, requires_grad=True) for s in shapes]


def close(a, b, bound):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item() <= bound


@pytest.mark.parametrize("dtype,bound", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_flash_attn_func_forward_and_grads_match_pytorch(dtype, bound):
    q, k, v = leaves((2, 37, 8, 64), (2, 53, 2, 64), (2, 53, 2, 64), dtype=dtype)
    out = ot.flash_attn_func(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == q.shape
    ref = sdpa_bsnd(q.double(), k.double(), v.double(), attn_mask=bottom_right_causal(37, 53))
    assert close(out, ref, bound)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad.double())
    for g, w in zip(got, want):
        assert g.dtype == dtype and close(g, w, 3 * bound)


def test_sdpa_signature_matches_pytorch():
    q, k, v = leaves((2, 4, 30, 32), (2, 4, 45, 32), (2, 4, 45, 32))
    pairs = [
        (dict(is_causal=True), dict(is_causal=True)),  # top-left, as PyTorch
        (dict(attn_mask=torch.rand(30, 45) < 0.8), None),
        (dict(attn_mask=torch.randn(1, 4, 30, 45)), None),
        (dict(scale=0.3), None),
    ]
    for ours, theirs in pairs:
        out = ot.scaled_dot_product_attention(q, k, v, **ours)
        ref = F.scaled_dot_product_attention(q, k, v, **(theirs or ours))
        assert close(out, ref, 1e-5), ours
    kv = leaves((2, 2, 45, 32))[0]
    with pytest.raises(ValueError, match="enable_gqa"):
        ot.scaled_dot_product_attention(q, kv, kv)
    out = ot.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    assert close(out, F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True), 1e-5)


def test_bias_and_sinks_get_gradients():
    q, k, v = leaves((1, 20, 4, 32), (1, 24, 4, 32), (1, 24, 4, 32))
    bias = torch.randn(4, 20, 24, requires_grad=True)
    sinks = torch.randn(4, requires_grad=True)
    out = ot.attention(q, k, v, bias=bias, sinks=sinks)
    # The same in PyTorch: the sink is one more logit in each row's softmax.
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(32) + bias
    s = torch.cat([s, sinks.view(1, 4, 1, 1).expand(1, 4, 20, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :-1]
    ref = torch.einsum("bhqk,bkhd->bqhd", p, v)
    assert close(out, ref, 1e-5)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, bias, sinks), grad)
    want = torch.autograd.grad(ref, (q, k, v, bias, sinks), grad)
    for g, w in zip(got, want):
        assert close(g, w, 1e-4)


def test_dropout_is_reproducible_and_scaled():
    q, k, v = leaves((1, 64, 2, 32), (1, 64, 2, 32), (1, 64, 2, 32))
    torch.manual_seed(7)
    a = ot.flash_attn_func(q, k, v, dropout_p=0.3)
    torch.manual_seed(7)
    b = ot.flash_attn_func(q, k, v, dropout_p=0.3)
    c = ot.flash_attn_func(q, k, v, dropout_p=0.3)
    assert torch.equal(a, b) and not torch.equal(a, c)
    grads = torch.autograd.grad(a.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.filterwarnings("ignore:Input #[0-9]+ requires gradient and is not a double precision")
def test_gradcheck_fp32():
    q, k, v = leaves((1, 5, 2, 8), (1, 7, 1, 8), (1, 7, 1, 8))

    def f(q, k, v):
        return ot.attention(q, k, v, causal=True)

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-3, fast_mode=True)


def test_opcheck_custom_op():
    """torch.library.opcheck: the schema, the fake implementation and the
    autograd registration agree with the real one."""
    q, k, v = leaves((1, 9, 2, 16), (1, 11, 2, 16), (1, 11, 2, 16))
    encoded = torch_ops._encode({"causal": True})[1]
    args = (q, k, v, None, None, None, None, None, None, encoded)
    torch.library.opcheck(torch.ops.ops_transformer.attention.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


def test_torch_compile():
    q, k, v = leaves((1, 16, 4, 32), (1, 16, 4, 32), (1, 16, 4, 32))

    def block(q, k, v):
        return ot.flash_attn_func(q * 2.0, k, v, causal=True).sum(dim=-1)

    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    out = compiled(q, k, v)
    assert torch.allclose(out, block(q, k, v), atol=1e-6)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    want = torch.autograd.grad(block(q, k, v).sum(), (q, k, v))
    assert all(torch.allclose(g, w, atol=1e-6) for g, w in zip(grads, want))


def test_inference_features_on_tensors():
    """Calls with inference-only features (here per-sequence key counts) run
    directly, on tensors, and give tensors."""
    q = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 100, 2, 64, dtype=torch.bfloat16)
    lengths = torch.tensor([100, 17], dtype=torch.int32)
    out = ot.attention(q, k, k, seqlens_kv=lengths)
    assert isinstance(out, torch.Tensor)
    ref = ot.reference_forward(q, k, k, seqlens_kv=lengths)
    assert close(out, ref, 1e-2)


def test_tensors_the_library_cannot_read_raise_one_line():
    """A tensor off the CPU, in a sparse layout or of a dtype the library
    does not compute in is refused in one line naming the argument, on q
    and on k, whichever path the call would take."""
    q = torch.randn(1, 8, 2, 16)
    for odd, error, words in ((q.to("meta"), ValueError, "tensor on meta, expected a CPU tensor"),
                              (q.to_sparse(), TypeError, "torch.sparse_coo tensor, expected a dense one"),
                              (q.double(), TypeError, "dtype torch.float64 is not supported")):
        for position, name in ((0, "q"), (1, "k")):
            args = [q, q, q]
            args[position] = odd
            with pytest.raises(error) as raised:
                ot.attention(*args, causal=True)
            message = str(raised.value)
            assert message.startswith(f"{name}: ") and words in message and "\n" not in message, message


def test_training_example_matches_sdpa():
    path = pathlib.Path(__file__).parents[1] / "examples" / "train_two_layer.py"
    spec = importlib.util.spec_from_file_location("train_two_layer", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    train = example.train
    ours, theirs = train(steps=4, use_ops_transformer=True), train(steps=4, use_ops_transformer=False)
    assert len(ours) == 4
    assert np.allclose(ours, theirs, rtol=1e-4, atol=1e-5), (ours, theirs)


@pytest.fixture(params=["exchange", "capsule"])
def dlpack_route(request):
    """The one-crossing call's two ways into PyTorch: DLPack's C exchange
    table (recent PyTorch) and to_dlpack with a capsule import."""
    uses_table = torch_ops.enable_fast_path(use_exchange=request.param == "exchange")
    try:
        if request.param == "exchange" and not uses_table:
            pytest.skip(f"PyTorch {torch.__version__} has no DLPack exchange table")
        yield request.param
    finally:
        torch_ops.enable_fast_path()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_everyday_call_on_tensors_takes_one_crossing(dtype, dlpack_route):
    """Tensors that need no gradient run in one crossing (DLPack in and out),
    with the general path's bits; a tensor that needs one, and an out= on
    such a call, are the autograd operator's business."""
    from ops_transformer import _core
    from ops_transformer._attention import Call
    q, k, v = (torch.randn(2, 4, s, 32, dtype=dtype) for s in (19, 23, 23))
    options = dict(layout="BNSD", causal=True)
    out, lse = _core.attention_direct(q, k, v, True, None, options)
    want, want_lse = Call(q, k, v, **options).forward(True)
    assert out.dtype == dtype and out.is_contiguous() and torch.equal(out, want) and torch.equal(lse, want_lse)
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 19) and lse.is_contiguous()
    # Views with a storage offset and strides, as the general path reads them.
    wide = torch.randn(2, 4, 23, 40, dtype=dtype)
    kv_view = wide[:, :, 2:, 8:]
    got = _core.attention_direct(q, kv_view, kv_view, False, None, options)
    assert got is not None and torch.equal(got, Call(q, kv_view, kv_view, **options).forward(False))
    # What the library cannot read is declined, not crashed on.
    for odd in (q.to("meta"), q.to_sparse(), q.to(torch.float64)):
        assert _core.attention_direct(odd, k, v, False, None, options) is None
    del got, out, lse  # outputs the library allocated are freed by PyTorch
    target = torch.empty_like(q)
    assert ot.attention(q, k, v, out=target, **options) is target and torch.equal(target, want)
    grad_q = q.clone().requires_grad_(True)
    assert _core.attention_direct(grad_q, k, v, False, None, options) is None
    assert _core.attention_direct(q.transpose(2, 3), k, v, False, None, options) is None  # strided head_dim
    with pytest.raises(TypeError, match="out"):
        ot.attention(grad_q, k, v, out=target, **options)
    with torch.no_grad():
        assert torch.equal(ot.attention(grad_q, k, v, out=target, **options), want)
    # A negated view (whose memory DLPack hands over un-negated) is resolved.
    negated = torch._neg_view(-q)
    assert _core.attention_direct(negated, k, v, False, None, options) is None
    assert torch.equal(ot.attention(negated, k, v, **options), want)
    with pytest.raises(TypeError, match="out: a negated view"):
        ot.attention(q, k, v, out=torch._neg_view(target), **options)


def test_torch_compile_inference_with_out():
    """Under torch.compile a call that needs no gradient still goes through
    the operator (the extension cannot be traced), out= included."""
    q = torch.randn(1, 16, 4, 32)

    def block(q, out):
        return ot.attention(q * 2.0, q, q, causal=True, out=out).sum()

    out = torch.empty_like(q)
    got = torch.compile(block, backend="aot_eager", fullgraph=True)(q, out)
    assert torch.allclose(got, block(q, torch.empty_like(q)))
    assert torch.equal(out, ot.attention(q * 2.0, q, q, causal=True))


def test_torch_compile_as_the_first_call():
    """A fresh process whose first call of the package is inside
    torch.compile(fullgraph=True): the lazy set-up of the tensor path must
    be traceable."""
    import subprocess
    import sys
    code = ("import torch, ops_transformer as ot\n"
            "q = torch.randn(1, 8, 2, 16)\n"
            "f = torch.compile(lambda q: ot.attention(q, q, q, causal=True), backend='aot_eager', fullgraph=True)\n"
            "assert torch.allclose(f(q), ot.attention(q, q, q, causal=True))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
