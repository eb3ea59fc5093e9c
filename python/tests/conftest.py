"""Shared helpers of the package's tests: random inputs, the accuracy rule."""

import numpy as np
import pytest

import ops_transformer as ot

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

# Relative L2 error against the float64 reference: the C++ suite's bounds
# (tests/driver/attention_case.cpp).
REL_L2 = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}
GRAD_REL_L2 = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2}


def numpy_dtype(name):
    if name == "bf16":
        if ml_dtypes is None:
            pytest.skip("bf16 in NumPy needs ml_dtypes")
        return ml_dtypes.bfloat16
    return {"fp32": np.float32, "fp16": np.float16}[name]


def rel_l2(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert np.all(np.isfinite(got)), "non-finite values in the result"
    norm = np.linalg.norm(ref)
    return np.linalg.norm(got - ref) / (norm if norm > 0 else 1.0)


@pytest.fixture
def rng(request):
    # A fresh seed per test, printed on failure, so every run draws new inputs.
    seed = np.random.SeedSequence().entropy % (1 << 32)
    request.node.user_properties.append(("seed", seed))
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def randn(rng, shape, dtype="fp32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(numpy_dtype(dtype))
