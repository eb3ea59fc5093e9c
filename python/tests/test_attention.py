"""ops_transformer on NumPy arrays: every version, layout and feature
against the float64 reference, the backward pass against its reference,
strides, and bad arguments."""

import threading

import numpy as np
import pytest

import ops_transformer as ot
from conftest import GRAD_REL_L2, REL_L2, numpy_dtype, randn, rel_l2


def to_layout(x, layout):
    """[batch, seq, heads, dim] -> the layout's storage."""
    if layout == "BSND":
        return np.ascontiguousarray(x)
    if layout == "BNSD":
        return np.ascontiguousarray(np.swapaxes(x, 1, 2))
    if layout == "BSH":
        return np.ascontiguousarray(x.reshape(x.shape[0], x.shape[1], -1))
    raise AssertionError(layout)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["BSND", "BNSD", "BSH"])
def test_forward_matches_reference(rng, version, dtype, layout):
    b, sq, skv, h, hkv, d = 2, int(rng.integers(1, 90)), int(rng.integers(1, 120)), 4, 2, 8 * int(rng.integers(1, 17))
    if version == 1:
        hkv = h  # keeps the case inside what every version offers
    q = randn(rng, (b, sq, h, d), dtype)
    k = randn(rng, (b, skv, hkv, d), dtype)
    v = randn(rng, (b, skv, hkv, d), dtype)
    causal = bool(rng.integers(0, 2))
    options = dict(layout=layout, causal=causal, num_heads=h, num_kv_heads=hkv)
    out, lse = ot.attention(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), version=version,
                            return_lse=True, **options)
    ref, ref_lse = ot.reference_forward(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout),
                                        return_lse=True, **options)
    assert out.dtype == q.dtype and out.shape == to_layout(q, layout).shape
    assert rel_l2(out, ref) <= REL_L2[dtype]
    finite = np.isfinite(ref_lse)
    assert np.array_equal(finite, np.isfinite(lse))  # fully masked rows: -inf in both
    assert np.allclose(lse[finite], ref_lse[finite], rtol=1e-4, atol=1e-4)


def test_features_against_reference(rng):
    """Masks and modifiers together: explicit mask, sinks, softcap, ALiBi,
    bias, a window; large logits; seq_q != seq_kv; fully masked rows."""
    b, sq, skv, h, d = 1, 37, 53, 4, 64
    q = randn(rng, (b, sq, h, d), scale=4.0)  # large logits
    k = randn(rng, (b, skv, 2, d), scale=4.0)
    v = randn(rng, (b, skv, 2, d))
    mask = rng.random((sq, skv)) < 0.7
    mask[3] = False  # a fully masked row
    options = dict(mask=mask, sinks=rng.standard_normal(h).astype(np.float32), softcap=20.0,
                   alibi_slopes=np.linspace(0.1, 0.5, h, dtype=np.float32),
                   bias=rng.standard_normal((h, sq, skv)).astype(np.float32))
    out = ot.attention(q, k, v, **options)
    ref = ot.reference_forward(q, k, v, **options)
    assert rel_l2(out, ref) <= REL_L2["fp32"]
    assert np.all(out[0, 3] == 0)
    for window in [(8, 0), (5, 3)]:
        out = ot.attention(q, k, v, window=window, causal=window[1] == 0)
        ref = ot.reference_forward(q, k, v, window=window, causal=window[1] == 0)
        assert rel_l2(out, ref) <= REL_L2["fp32"]


@pytest.mark.parametrize("version", [2, 3])
def test_varlen(rng, version):
    lengths_q, lengths_kv = [5, 0, 33, 17], [9, 4, 33, 60]
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    cu_kv = np.concatenate([[0], np.cumsum(lengths_kv)]).astype(np.int32)
    q = randn(rng, (cu_q[-1], 4, 32), "bf16")
    k = randn(rng, (cu_kv[-1], 1, 32), "bf16")
    v = randn(rng, (cu_kv[-1], 1, 32), "bf16")
    out = ot.flash_attn_varlen_func(q, k, v, cu_q, cu_kv, max(lengths_q), max(lengths_kv), causal=True)
    ref = ot.reference_forward(q, k, v, layout="TND", cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, causal=True)
    assert out.shape == q.shape
    assert rel_l2(out, ref) <= REL_L2["bf16"]


def test_strided_inputs_are_read_in_place(rng):
    """Views with any strides (but a contiguous head_dim) give the same bits
    as their contiguous copies; nothing is copied behind the caller's back,
    so a strided head_dim is refused."""
    big = randn(rng, (2, 64, 6, 40))
    q = big[:, ::2, 1:5, :32]  # every other token, four of six heads, part of each row
    k = randn(rng, (2, 50, 4, 64))[:, :, :, 16:48]
    v = randn(rng, (2, 4, 50, 32)).transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous and not k.flags.c_contiguous and not v.flags.c_contiguous
    out = ot.attention(q, k, v, causal=True)
    again = ot.attention(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v), causal=True)
    assert np.array_equal(out, again)
    strided = randn(rng, (2, 50, 4, 64))[..., ::2]
    with pytest.raises(ValueError, match="head_dim stride must be 1"):
        ot.attention(q, strided, v)
    copied = ot.attention(q, strided, v, copy=True)  # a copy only when asked for
    assert np.array_equal(copied, ot.attention(q, np.ascontiguousarray(strided), v))


def test_paged_cache_equals_contiguous(rng):
    b, h, hkv, d, block = 2, 8, 2, 64, 16
    seqlens = np.array([70, 33], dtype=np.int32)
    k = randn(rng, (b, 80, hkv, d), "bf16")
    v = randn(rng, (b, 80, hkv, d), "bf16")
    q = randn(rng, (b, 1, h, d), "bf16")
    blocks_per_seq = 5
    order = rng.permutation(b * blocks_per_seq).astype(np.int32)
    table = order.reshape(b, blocks_per_seq)
    pool_k = np.zeros((b * blocks_per_seq * block, hkv, d), dtype=k.dtype)
    pool_v = np.zeros_like(pool_k)
    for s in range(b):
        for n in range(blocks_per_seq):
            dst = table[s, n] * block
            pool_k[dst:dst + block] = k[s, n * block:(n + 1) * block]
            pool_v[dst:dst + block] = v[s, n * block:(n + 1) * block]
    # The same tiles for both calls (a paged call's K/V tile must fit a block).
    paged = ot.attention(q, pool_k[None], pool_v[None], block_table=table, block_size=block, seqlens_kv=seqlens,
                         tile_kv=block)
    contiguous = ot.attention(q, k, v, seqlens_kv=seqlens, tile_kv=block)
    assert np.array_equal(paged.view(np.uint16), contiguous.view(np.uint16))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_backward_matches_reference(rng, dtype):
    b, sq, skv, h, hkv, d = 2, 45, 71, 4, 2, 64
    q, k, v = (randn(rng, s, dtype) for s in [(b, sq, h, d), (b, skv, hkv, d), (b, skv, hkv, d)])
    dout = randn(rng, (b, sq, h, d), dtype)
    options = dict(causal=True, sinks=rng.standard_normal(h).astype(np.float32),
                   bias=rng.standard_normal((1, sq, skv)).astype(np.float32))
    out, lse = ot.attention(q, k, v, return_lse=True, **options)
    dq, dk, dv, dbias, dsinks = ot.attention_backward(dout, q, k, v, out, lse, grad_dtype="fp32",
                                                      return_aux_grads=True, **options)
    rq, rk, rv, rbias, rsinks = ot.reference_backward(dout, q, k, v, **options)
    for got, ref in ((dq, rq), (dk, rk), (dv, rv), (dbias, rbias), (dsinks, rsinks)):
        assert rel_l2(got, ref) <= GRAD_REL_L2[dtype]
    again = ot.attention_backward(dout, q, k, v, out, lse, grad_dtype="fp32", threads=1, **options)
    assert all(np.array_equal(x, y) for x, y in zip(again, (dq, dk, dv)))  # deterministic across thread counts


def test_plan_and_isas(rng):
    assert "generic" in ot.available_isas()
    assert set(ot.available_isas()) <= set(ot.built_isas().split())
    q = np.empty((1, 4096, 16, 128), np.float32)
    plan = ot.plan(q, q, q, causal=True)
    assert plan["tile_q"] > 0 and plan["working_set_bytes"] <= plan["limit_bytes"]
    with pytest.raises(ValueError, match="Resource usage exceeds device limit"):
        ot.plan(q, q, q, tile_q=512, tile_kv=512)
    for isa in ot.available_isas():
        small = randn(rng, (1, 20, 2, 32), "bf16")
        out = ot.attention(small, small, small, isa=isa)
        assert rel_l2(out, ot.reference_forward(small, small, small)) <= REL_L2["bf16"]


def test_bad_arguments_raise_one_line(rng):
    q = randn(rng, (1, 8, 2, 32))
    cases = [
        (dict(k=q[..., :16]), ValueError, "head_dim"),
        (dict(version=4), ValueError, "version: 4"),
        (dict(layout="XYZ"), ValueError, "layout"),
        (dict(mask=np.ones((3, 3), bool)), ValueError, "mask: shape"),
        (dict(sinks=np.ones(5, np.float32)), ValueError, "sinks: shape"),
        (dict(tile_q=48), ValueError, "tile"),
        (dict(dropout_p=1.5), ValueError, "dropout_p"),
        (dict(k=q.astype(np.float16)), TypeError, "k and v|dtype"),
        (dict(q=q.astype(np.float64)), TypeError, "float64"),
        (dict(isa="sse9"), ValueError, "isa"),
        (dict(version=1, sinks=np.ones(2, np.float32)), ValueError, "sink"),
        # Keywords of the wrong type name themselves (not the binding's
        # list of signatures), and nothing truthy passes for a flag.
        (dict(causal="yes"), TypeError, "^causal: expected True or False"),
        (dict(scale="x"), TypeError, "^scale: expected a number"),
        (dict(threads=2.5), TypeError, "^threads: expected an integer"),
        (dict(tile_q=1 << 40), ValueError, "^tile_q: 1099511627776 is out of range"),
        (dict(window=(1,)), TypeError, "^window: expected \\(left, right\\)"),
        (dict(window=("a", 0)), TypeError, "^window: expected \\(left, right\\) of integers"),
        (dict(seq_kv="8"), TypeError, "^seq_kv: expected an integer"),
        (dict(async_prefetch=1), TypeError, "^async_prefetch: expected True or False"),
        (dict(out_dtype="fp64"), ValueError, "^out_dtype: 'fp64'"),
        (dict(layout=1), TypeError, "^layout: expected a string"),
        (dict(dropout_p=0.1, dropout_seed="a"), TypeError, "^dropout_seed: expected an integer"),
        (dict(block_table=np.zeros((1, 1), np.int32), block_size=16), ValueError, "^k: a block pool of 8 tokens"),
        (dict(return_lse="x"), TypeError, "^return_lse: expected True or False"),
    ]
    for change, error, pattern in cases:
        args = dict(q=q, k=q, v=q)
        args.update(change)
        qq, kk, vv = args.pop("q"), args.pop("k"), args.pop("v")
        if kk is not q and "v" not in change and error is not TypeError:
            vv = kk
        with pytest.raises(error, match=pattern) as info:
            ot.attention(qq, kk, vv, **args)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="no backward"):
        ot.attention_backward(q, q, q, q, q, np.zeros((1, 2, 8), np.float32), version=3)
    # The drop-in signatures hold their keywords to the same line.
    from ops_transformer import compat
    bnsd = q.swapaxes(1, 2)
    for call, pattern in ((lambda: compat.flash_attn_func(q, q, q, window_size=5), "^window: expected \\(left, right\\)"),
                          (lambda: compat.flash_attn_func(q, q, q, dropout_p="0.1"), "^dropout_p: expected a number"),
                          (lambda: compat.scaled_dot_product_attention(bnsd, bnsd, bnsd, is_causal=1),
                           "^is_causal: expected True or False"),
                          (lambda: ot.attention_backward(q, q, q, q, q, np.zeros((1, 2, 8), np.float32),
                                                         return_aux_grads="yes"), "^return_aux_grads: expected")):
        with pytest.raises(TypeError, match=pattern) as info:
            call()
        assert "\n" not in str(info.value)


def test_calls_release_the_gil(rng):
    """Two Python threads calling at once both finish with correct results
    (each call runs with the GIL released)."""
    q = randn(rng, (1, 256, 4, 64))
    ref = ot.attention(q, q, q, causal=True)
    results = []

    def work():
        results.append(all(np.array_equal(ot.attention(q, q, q, causal=True), ref) for _ in range(3)))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True]


class DlpackOnly:
    """A tensor of some other framework: nothing but the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_any_dlpack_producer_is_read_in_place(rng):
    q = randn(rng, (1, 33, 4, 32))
    k = randn(rng, (1, 40, 4, 32))
    out = ot.attention(DlpackOnly(q), DlpackOnly(k), DlpackOnly(k), causal=True)
    # This framework has no from_dlpack of its own: the result comes back in NumPy.
    assert isinstance(out, np.ndarray)
    assert np.array_equal(out, ot.attention(q, k, k, causal=True))
    with pytest.raises(TypeError, match="out: a NumPy array or a PyTorch tensor"):
        ot.attention(DlpackOnly(q), DlpackOnly(k), DlpackOnly(k), out=DlpackOnly(np.empty_like(q)))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["BSND", "BNSD", "BSH"])
def test_everyday_call_takes_one_crossing_with_the_same_bits(rng, dtype, layout):
    """The everyday call (the common keywords on NumPy arrays) runs in one
    crossing into the extension (_core.attention_direct), and gives the
    general path's bits, output and LSE, allocated or written into out=."""
    from ops_transformer import _core
    from ops_transformer._attention import Call
    b, sq, skv, h, hkv, d = 2, int(rng.integers(1, 70)), int(rng.integers(1, 90)), 4, 2, 8 * int(rng.integers(1, 17))
    q, k, v = (to_layout(randn(rng, (b, s, n, d), dtype), layout) for s, n in ((sq, h), (skv, hkv), (skv, hkv)))
    options = dict(layout=layout, causal=bool(rng.integers(0, 2)), num_heads=h, num_kv_heads=hkv,
                   scale=float(rng.uniform(0.05, 0.3)), version=int(rng.integers(1, 4)) if hkv == h else 2)
    direct = _core.attention_direct(q, k, v, True, None, options)
    assert direct is not None, "the everyday call fell back to the general path"
    general = Call(q, k, v, **options).forward(True)
    assert direct[0].dtype == general[0].dtype and direct[0].shape == general[0].shape
    assert np.array_equal(direct[0].view(np.uint8), general[0].view(np.uint8))
    assert np.array_equal(direct[1], general[1])
    out = np.full_like(q, np.nan)
    assert ot.attention(q, k, v, out=out, **options) is out
    assert np.array_equal(out.view(np.uint8), general[0].view(np.uint8))


def test_drop_in_signatures_take_the_one_crossing_call(rng, monkeypatch):
    """flash_attn_func and scaled_dot_product_attention pass their unused
    features at "off" values: those calls still cross once, with the
    general path's bits."""
    from ops_transformer import _attention, compat
    q = randn(rng, (2, 33, 4, 32), "bf16")
    k = randn(rng, (2, 40, 2, 32), "bf16")
    qt, kt = np.swapaxes(q, 1, 2), np.swapaxes(k, 1, 2)
    want_fa = _attention.Call(q, k, k, causal=True).forward(False)
    want_sdpa = _attention.Call(qt, kt, kt, layout="BNSD", sparse_mode="causal_top_left").forward(False)

    def general_path(*args, **kwargs):
        raise AssertionError("took the general path")

    monkeypatch.setattr(_attention, "Call", general_path)
    assert np.array_equal(ot.flash_attn_func(q, k, k, causal=True).view(np.uint16), want_fa.view(np.uint16))
    got = compat.scaled_dot_product_attention(qt, kt, kt, is_causal=True, enable_gqa=True)
    assert np.array_equal(got.view(np.uint16), want_sdpa.view(np.uint16))


def test_everyday_call_leaves_the_rest_to_the_general_path(rng):
    """What the one-crossing call does not recognise it declines (None), so
    the general path decides: other keywords, subclasses, a strided or
    reversed head_dim, mixed K/V dtypes, an out= it cannot take."""
    from ops_transformer import _core

    class Sub(np.ndarray):
        pass

    q = randn(rng, (1, 12, 2, 32))
    declined = [
        ((q, q, q), dict(window=(2, 2))),
        ((q, q, q), dict(softcap=30.0)),
        ((q, q, q), dict(dropout_p=0.1)),
        ((q, q, q), dict(sparse_mode="band")),
        ((q, q, q), dict(mask=np.ones((12, 12), bool))),
        ((q, q, q), dict(layout="bsnd")),
        ((q, q, q), dict(causal=1)),
        ((q, q, q), dict(layout="BSH")),  # no num_heads: the general path's message
        ((q.view(Sub), q, q), {}),
        ((q[..., ::2], q[..., ::2], q[..., ::2]), {}),
        ((q[..., ::-1], q, q), {}),
        ((q, q, q.astype(np.float16)), {}),
        ((q.astype(np.float64), q, q), {}),
    ]
    for args, options in declined:
        assert _core.attention_direct(*args, False, None, options) is None, options
    for out in (np.empty((1, 12, 2, 16), np.float32), np.empty_like(q, np.float16), [0.0]):
        assert _core.attention_direct(q, q, q, False, out, {}) is None
    with pytest.raises(ValueError, match="out: shape"):
        ot.attention(q, q, q, out=np.empty((1, 12, 2, 16), np.float32))
    with pytest.raises(TypeError, match="out: dtype"):
        ot.attention(q, q, q, out=np.empty_like(q, np.float16))
    # A read-only out= is declined by the one-crossing call and refused by
    # the general path, unwritten.
    frozen = np.zeros_like(q)
    frozen.setflags(write=False)
    assert _core.attention_direct(q, q, q, False, frozen, {}) is None
    with pytest.raises(ValueError, match="^out: a read-only array"):
        ot.attention(q, q, q, out=frozen)
    assert not frozen.any()
    # An out= whose rows are strided (its head_dim contiguous) is written in place.
    wide = np.zeros((1, 12, 2, 64), np.float32)
    ot.attention(q, q, q, out=wide[..., 16:48])
    assert np.array_equal(wide[..., 16:48], ot.attention(q, q, q))
    assert not wide[..., :16].any() and not wide[..., 48:].any()
