"""Shared helpers of the data scripts: dtypes (bf16 via uint16, FP8 via
uint8), config.txt, the causal mask rule, atomic file writes, and the float64
reference.

Kept free of everything but NumPy and the standard library.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fa_bench import write_atomic  # noqa: E402,F401  (the data scripts' files, whole or not at all)

# dtype spellings: the command-line name, the guide's config.txt name (NumPy's
# __name__), bytes per element.
DTYPES = {
    "fp16": ("float16", 2),
    "bf16": ("bfloat16", 2),
    "fp32": ("float32", 4),
    "fp8_e4m3": ("float8_e4m3fn", 1),
    "fp8_e5m2": ("float8_e5m2", 1),
}
FP8 = ("fp8_e4m3", "fp8_e5m2")
# FP8 formats: (mantissa bits, exponent bias, largest finite value).
FP8_FORMATS = {"fp8_e4m3": (3, 7, 448.0), "fp8_e5m2": (2, 15, 57344.0)}
CONFIG_NAMES = {v[0]: k for k, v in DTYPES.items()}
LAYOUTS = ("BSH", "BSND", "BNSD")
# Default max-abs tolerance per dtype: the guide's 1e-2 for fp16; bf16 keeps
# 8 mantissa bits, so its output rounding alone reaches ~4e-3 near 1.
DEFAULT_TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2, "fp32": 1e-4}
# The gradients' relative L2 bound per input dtype (the test suite's: dO and
# O are rounded to the dtype, and D = rowsum(dO * O) enters every dS).
GRAD_REL_L2_BOUND = {"fp16": 5e-3, "bf16": 3e-2, "fp32": 1e-4}
# The dtypes an output is written in (FP8 inputs write one of these).
OUTPUT_DTYPES = ("bf16", "fp16", "fp32")


class InputError(Exception):
    """Bad input: reported as one line, exit status 2."""


def fail_input(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_dtype(name):
    if name in DTYPES:
        return name
    if name in CONFIG_NAMES:
        return CONFIG_NAMES[name]
    raise InputError(f"unknown dtype '{name}' (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)")


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bits, round to nearest even, NaN kept NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    quiet = ((u >> 16) | 0x0040).astype(np.uint16)
    return np.where(nan, quiet, rounded)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def fp8_values(dtype):
    """The 256 codes of an FP8 format as float64 (NaN for its NaN codes)."""
    man_bits, bias, _ = FP8_FORMATS[dtype]
    codes = np.arange(256)
    exp = (codes & 0x7F) >> man_bits
    man = codes & ((1 << man_bits) - 1)
    mag = np.where(exp == 0, np.ldexp(man.astype(np.float64), 1 - bias - man_bits),
                   np.ldexp(((1 << man_bits) + man).astype(np.float64), exp - bias - man_bits))
    if dtype == "fp8_e4m3":  # no Inf; S.1111.111 is NaN
        mag = np.where((codes & 0x7F) == 0x7F, np.nan, mag)
    else:  # e5m2: exponent 31 is Inf (mantissa 0) or NaN
        mag = np.where(exp == 31, np.where(man == 0, np.inf, np.nan), mag)
    return np.where(codes & 0x80, -mag, mag)


def f32_to_fp8_bits(x, dtype):
    """float values -> uint8 FP8 codes, round to nearest even; beyond the
    largest finite value e4m3 saturates (it has no Inf), e5m2 becomes Inf."""
    man_bits, bias, max_finite = FP8_FORMATS[dtype]
    values = fp8_values(dtype)
    max_code = int(np.nonzero(values == max_finite)[0][0])
    table = values[: max_code + 1]  # the non-negative finite codes, increasing
    a = np.abs(np.asarray(x, dtype=np.float64))
    hi = np.clip(np.searchsorted(table, a), 1, max_code)
    lo = hi - 1
    d_lo, d_hi = a - table[lo], table[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= table[max_code], max_code, code)
    if dtype == "fp8_e5m2":  # the rounding boundary above the largest finite value goes to Inf
        code = np.where(a >= max_finite + np.ldexp(1.0, int(np.log2(max_finite)) - man_bits - 1), 0x7C, code)
    code = np.where(np.isnan(a), 0x7F if dtype == "fp8_e4m3" else 0x7E, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


KV_CACHE_DTYPES = ("int8", "fp8_e4m3", "fp8_e5m2")


def quantize_kv_cache(x, kv_dtype):
    """The values a quantized K/V cache holds for K or V `x` ([B, N, S, D]),
    as fa2_benchmark --kv-dtype quantizes it (append_kv_cache, in fp32):
    int8 with a scale per (batch, head, token) row, its largest magnitude /
    127, values rounded to nearest even; FP8 with one factor per head, the
    head's largest finite magnitude / the format's largest value.  Returns
    the dequantized values (float64), what the operator computes with."""
    x32 = np.asarray(x, dtype=np.float32)
    if kv_dtype == "int8":
        amax = np.abs(x32).max(axis=3, keepdims=True)
        scale = amax / np.float32(127.0)
        with np.errstate(divide="ignore"):
            inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
        codes = np.clip(np.rint(x32 * inv), -127, 127)
        return codes.astype(np.float64) * scale.astype(np.float64)
    finite = np.where(np.isfinite(x32), np.abs(x32), np.float32(0.0))
    amax = finite.max(axis=(0, 2, 3), keepdims=True)
    descale = np.where(amax > 0, amax / np.float32(FP8_FORMATS[kv_dtype][2]), np.float32(1.0)).astype(np.float32)
    codes = f32_to_fp8_bits((x32 / descale).astype(np.float32), kv_dtype)
    return fp8_values(kv_dtype)[codes] * descale.astype(np.float64)


def to_storage(x_f32, dtype):
    """float32 values -> array whose bytes are the dtype's storage."""
    if dtype == "fp32":
        return x_f32.astype(np.float32)
    if dtype == "fp16":
        return x_f32.astype(np.float16)
    if dtype in FP8:
        return f32_to_fp8_bits(x_f32, dtype)
    return f32_to_bf16_bits(x_f32)


def from_storage(raw_bytes_array, dtype):
    """1-D array read with storage_numpy_dtype(dtype) -> float64 values."""
    if dtype == "bf16":
        return bf16_bits_to_f32(raw_bytes_array).astype(np.float64)
    if dtype in FP8:
        return fp8_values(dtype)[raw_bytes_array]
    return raw_bytes_array.astype(np.float64)


def storage_numpy_dtype(dtype):
    return {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8}[dtype]


def causal_mask(seq_q, seq_kv):
    """int8 [seq_q, seq_kv], 1 where query i may attend key j: j <= i + (seq_kv - seq_q).

    Aligned bottom-right (FlashAttention 2.1 and later); equal to np.tril when
    seq_q == seq_kv.  A query row with no key to attend is all zeros.
    """
    i = np.arange(seq_q)[:, None]
    j = np.arange(seq_kv)[None, :]
    return (j <= i + (seq_kv - seq_q)).astype(np.int8)


def read_config(path):
    """config.txt (key=value lines) -> dict with typed shape entries."""
    if not os.path.isfile(path):
        raise InputError(f"config file '{path}' not found (expected config.txt beside the inputs, "
                         "as written by gen_fa2_test_data.py; or pass --config)")
    cfg = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise InputError(f"{path}: line '{line}' is not key=value")
            key, value = line.split("=", 1)
            cfg[key.strip()] = value.strip()
    out = {}
    for key in ("batch_size", "seq_len_q", "seq_len_kv", "num_heads", "head_dim"):
        if key not in cfg:
            raise InputError(f"{path}: missing {key}")
        try:
            out[key] = int(cfg[key])
        except ValueError:
            raise InputError(f"{path}: {key}={cfg[key]} is not an integer") from None
        if out[key] <= 0:
            raise InputError(f"{path}: {key} must be positive (got {out[key]})")
    out["num_kv_heads"] = int(cfg.get("num_kv_heads", out["num_heads"]))
    if out["num_kv_heads"] <= 0 or out["num_heads"] % out["num_kv_heads"]:
        raise InputError(f"{path}: num_kv_heads={out['num_kv_heads']} must divide num_heads={out['num_heads']}")
    out["dtype"] = parse_dtype(cfg.get("dtype", "float16"))
    # FP8 inputs: the output's dtype and each tensor's dequantization factor.
    out["out_dtype"] = parse_dtype(cfg.get("out_dtype", "bfloat16" if out["dtype"] in FP8 else out["dtype"]))
    if out["out_dtype"] not in OUTPUT_DTYPES or (out["dtype"] not in FP8 and out["out_dtype"] != out["dtype"]):
        raise InputError(f"{path}: out_dtype={cfg.get('out_dtype')} does not go with dtype={cfg.get('dtype')}")
    for key in ("descale_q", "descale_k", "descale_v"):
        try:
            out[key] = float(cfg.get(key, "1"))
        except ValueError:
            raise InputError(f"{path}: {key}={cfg[key]} is not a number") from None
        if not (np.isfinite(out[key]) and out[key] > 0):
            raise InputError(f"{path}: {key} must be a finite positive number (got {cfg[key]})")
    # A quantized K/V cache (fa2_benchmark --kv-dtype): K and V are stored in
    # dtype and quantized by the operator's caller.
    out["kv_dtype"] = cfg.get("kv_dtype") or None
    if out["kv_dtype"] is not None:
        if out["kv_dtype"] not in KV_CACHE_DTYPES or out["dtype"] not in ("fp16", "bf16"):
            raise InputError(f"{path}: kv_dtype={out['kv_dtype']} (expected int8, fp8_e4m3 or fp8_e5m2, with dtype "
                             f"fp16 or bf16; got dtype {out['dtype']})")
    out["causal"] = cfg.get("causal", "true").lower() in ("1", "true", "yes", "on")
    out["layout"] = cfg.get("layout", "BSH").upper()
    if out["layout"] not in LAYOUTS:
        raise InputError(f"{path}: layout={out['layout']} (expected one of {', '.join(LAYOUTS)})")
    return out


def load_tensor(path, dtype, count, what):
    """Reads exactly `count` elements of `dtype` from `path` as float64."""
    if not os.path.isfile(path):
        raise InputError(f"{what}: file '{path}' not found")
    size = os.path.getsize(path)
    expected = count * DTYPES[dtype][1]
    if size != expected:
        raise InputError(f"{what}: '{path}' has {size} bytes, expected {expected} "
                         f"({count} {dtype} elements)")
    return from_storage(np.fromfile(path, dtype=storage_numpy_dtype(dtype)), dtype)


def to_bnsd(x, batch, seq, heads, head_dim, layout):
    """Flat array in `layout` -> [batch, heads, seq, head_dim] view."""
    if layout == "BNSD":
        return x.reshape(batch, heads, seq, head_dim)
    return x.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)


def load_typed(path, dtype, count, what):
    """Reads exactly `count` elements of `dtype` from `path` in that dtype
    (bf16 and FP8 as ml_dtypes' NumPy types), for a library call."""
    load_tensor(path, dtype, count, what)  # the size and presence checks
    raw = np.fromfile(path, dtype=storage_numpy_dtype(dtype))
    if dtype in ("bf16",) + tuple(FP8):
        import ml_dtypes
        return raw.view({"bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                         "fp8_e5m2": ml_dtypes.float8_e5m2}[dtype])
    return raw


def probabilities(qh, kh, mask, scale):
    """One head's softmax(scale q k^T + mask) in float64 ([Sq, Skv]); a row
    with nothing to attend is 0."""
    s = (qh @ kh.T) * scale
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    alive = np.isfinite(m)
    p = np.exp(s - np.where(alive, m, 0.0))
    denom = p.sum(axis=1, keepdims=True)
    return np.where(alive, p / np.where(denom > 0, denom, 1.0), 0.0)


def reference_attention(q, k, v, mask=None, scale=None):
    """float64 softmax(scale Q K^T + mask) V.

    q: [B, H, Sq, D]; k, v: [B, Hkv, Skv, D]; mask: bool [Sq, Skv] or None
    (True = may attend).  Returns [B, H, Sq, D]; a row with nothing to attend
    is 0.  One (batch, head) at a time keeps memory at one score matrix.
    """
    batch, heads, seq_q, head_dim = q.shape
    group = heads // k.shape[1]
    if scale is None:
        scale = head_dim ** -0.5
    out = np.zeros_like(q, dtype=np.float64)
    for b in range(batch):
        for h in range(heads):
            out[b, h] = probabilities(q[b, h], k[b, h // group], mask, scale) @ v[b, h // group]
    return out


def reference_attention_backward(q, k, v, dout, mask=None, scale=None):
    """float64 gradients of softmax(scale Q K^T + mask) V for the upstream
    gradient dout ([B, H, Sq, D]): dP = dO V^T, D = rowsum(dO * O),
    dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO, with
    dK and dV summed over each GQA group.  Returns (dq, dk, dv) in q's, k's
    and v's shapes.
    """
    batch, heads, seq_q, head_dim = q.shape
    group = heads // k.shape[1]
    if scale is None:
        scale = head_dim ** -0.5
    dq, dk, dv = np.zeros_like(q, np.float64), np.zeros_like(k, np.float64), np.zeros_like(v, np.float64)
    for b in range(batch):
        for h in range(heads):
            kh, vh = k[b, h // group], v[b, h // group]
            p = probabilities(q[b, h], kh, mask, scale)
            o = p @ vh
            dp = dout[b, h] @ vh.T
            ds = p * (dp - np.sum(dout[b, h] * o, axis=1, keepdims=True))
            dq[b, h] = scale * (ds @ kh)
            dk[b, h // group] += scale * (ds.T @ q[b, h])
            dv[b, h // group] += p.T @ dout[b, h]
    return dq, dk, dv


def in_process_output(q_path, k_path, v_path, config_path, mask_path, version):
    """The output of the library's own call on the input files, through the
    Python package: float64 [batch, seq_q, heads * head_dim]."""
    try:
        import ops_transformer
    except ImportError as e:
        raise InputError(f"--in-process: the Python package ops_transformer is not importable ({e}); "
                                 "pip install . (or PYTHONPATH=<build>/python)") from None
    cfg = read_config(config_path or os.path.join(os.path.dirname(os.path.abspath(q_path)), "config.txt"))
    b, sq, skv = cfg["batch_size"], cfg["seq_len_q"], cfg["seq_len_kv"]
    h, hkv, d, dtype, layout = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"], cfg["dtype"], cfg["layout"]
    if dtype not in ("fp32", "fp16", "bf16") or cfg["kv_dtype"]:
        raise InputError(f"--in-process: {dtype} inputs{' with a quantized cache' if cfg['kv_dtype'] else ''} "
                                 "(expected fp32, fp16 or bf16 without kv_dtype; verify fa2_benchmark's file instead)")
    shape = {"BSH": lambda s, n: (b, s, n * d), "BSND": lambda s, n: (b, s, n, d), "BNSD": lambda s, n: (b, n, s, d)}
    if layout not in shape:
        raise InputError(f"--in-process: layout {layout} (expected BSH, BSND or BNSD)")
    q = load_typed(q_path, dtype, b * sq * h * d, "Q").reshape(shape[layout](sq, h))
    k = load_typed(k_path, dtype, b * skv * hkv * d, "K").reshape(shape[layout](skv, hkv))
    v = load_typed(v_path, dtype, b * skv * hkv * d, "V").reshape(shape[layout](skv, hkv))
    options = dict(layout=layout, num_heads=h, num_kv_heads=hkv, version=version, causal=cfg["causal"])
    if mask_path is not None:
        if not os.path.isfile(mask_path):
            raise InputError(f"mask: file '{mask_path}' not found")
        options.update(mask=np.fromfile(mask_path, dtype=np.int8).reshape(sq, skv), causal=False)
    print(f"Running FlashAttention-v{version} in process (ops_transformer, {', '.join(ops_transformer.available_isas())})...")
    try:
        out = ops_transformer.attention(q, k, v, **options)
    except (ValueError, TypeError) as e:
        raise InputError(f"--in-process: {e}") from None
    flat = np.asarray(out).reshape(-1).astype(np.float64)
    return to_bnsd(flat, b, sq, h, d, layout).transpose(0, 2, 1, 3).reshape(b, sq, h * d)


def add_in_process_arguments(parser):
    """--in-process and --version, for the verification scripts."""
    parser.add_argument("--in-process", action="store_true",
                        help="compute the output here through the Python package ops_transformer instead of reading "
                             "OUTPUT (no output file; then give only Q, K and V)")
    parser.add_argument("--version", type=int, default=2, choices=(1, 2, 3), help="with --in-process: FlashAttention-vN")


def shift_in_process_positionals(parser, a):
    """With --in-process there is no OUTPUT: the positional arguments are Q,
    K and V (their defaults the same as without it)."""
    if not a.in_process:
        return
    defaults = [parser.get_default(name) for name in ("output", "q", "k", "v")]
    given = [x for x, default in zip((a.output, a.q, a.k, a.v), defaults) if x != default]
    if len(given) > 3:
        fail_input("--in-process: expected at most Q, K and V (no OUTPUT file)")
    a.output = None
    a.q, a.k, a.v = given + defaults[1 + len(given):]


def load_case(output_path, q_path, k_path, v_path, config_path=None, mask_path=None, out=None):
    """Loads an operator output and its inputs (shapes, dtype, layout and
    causality from config.txt beside Q) and computes the float64 reference.

    The mask is `mask_path`, else input_causal_mask.bin beside Q when the
    config says causal=true, else the causal rule itself.  Returns a dict with
    cfg, out and ref ([batch, seq_q, heads * head_dim] float64), q, k, v
    ([B, N, S, D]), mask (bool [seq_q, seq_kv] or None) and ref_bnsd.  `out`
    (float64 [batch, seq_q, heads * head_dim]) stands for the output file when
    given (an output computed in this process).  With
    a quantized K/V cache (config kv_dtype), k and v are the cache's
    dequantized values and k_unquantized, v_unquantized the inputs as given.
    """
    cfg = read_config(config_path or os.path.join(os.path.dirname(os.path.abspath(q_path)), "config.txt"))
    b, sq, skv = cfg["batch_size"], cfg["seq_len_q"], cfg["seq_len_kv"]
    h, hkv, d, dtype, layout = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"], cfg["dtype"], cfg["layout"]
    print("Loading data...")
    if out is None:
        out = load_tensor(output_path, cfg["out_dtype"], b * sq * h * d, "output").reshape(b, sq, h * d)
    # Inputs as the operator sees them: FP8 values times their descale factors.
    q = to_bnsd(load_tensor(q_path, dtype, b * sq * h * d, "Q"), b, sq, h, d, layout) * cfg["descale_q"]
    k = to_bnsd(load_tensor(k_path, dtype, b * skv * hkv * d, "K"), b, skv, hkv, d, layout) * cfg["descale_k"]
    v = to_bnsd(load_tensor(v_path, dtype, b * skv * hkv * d, "V"), b, skv, hkv, d, layout) * cfg["descale_v"]
    k_unquantized = v_unquantized = None
    if cfg["kv_dtype"]:  # a quantized cache: the operator reads the dequantized values
        k_unquantized, v_unquantized = k, v
        k, v = quantize_kv_cache(k, cfg["kv_dtype"]), quantize_kv_cache(v, cfg["kv_dtype"])
    mask = None
    if mask_path is None and cfg["causal"]:
        beside = os.path.join(os.path.dirname(os.path.abspath(q_path)), "input_causal_mask.bin")
        if os.path.isfile(beside):
            mask_path = beside
        else:
            mask = causal_mask(sq, skv).astype(bool)
    if mask_path is not None:
        if not os.path.isfile(mask_path):
            raise InputError(f"mask: file '{mask_path}' not found")
        raw = np.fromfile(mask_path, dtype=np.int8)
        if raw.size != sq * skv:
            raise InputError(f"mask: '{mask_path}' has {raw.size} bytes, expected {sq * skv} "
                             f"for [seq_q={sq}, seq_kv={skv}] int8")
        mask = raw.reshape(sq, skv) != 0
    print("Computing reference (NumPy, float64)...")
    ref = reference_attention(q, k, v, mask)
    return {"cfg": cfg, "out": out, "ref": ref.transpose(0, 2, 1, 3).reshape(b, sq, h * d), "ref_bnsd": ref,
            "q": q, "k": k, "v": v, "mask": mask, "k_unquantized": k_unquantized, "v_unquantized": v_unquantized}
