"""Shared fixtures of the Python tests: the device context, reproducible inputs, the error measure of
docs/math.md §5, and outputs poisoned with NaN before every call (so an element the library leaves unwritten
shows up as an error instead of passing as the zero a fresh allocation happens to hold)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import camdelta  # noqa: E402
from camdelta import ops  # noqa: E402


def rel_err(x, ref):
    """max|x - ref| / max(max|ref|, tiny) (docs/math.md §5); NaN anywhere counts as an infinite error."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert x.shape == ref.shape, (x.shape, ref.shape)
    if not np.all(np.isfinite(x)):
        return np.inf
    scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-30)
    return float(np.max(np.abs(x - ref))) / scale if x.size else 0.0


# 16-bit activations (docs/math.md §8.7): against the f64 reference fed the same rounded inputs; y within 2e-3 (f16)
# and 1.6e-2 (bf16) of max |reference|, every gradient within twice that
HALF = {"f16": 2e-3, "bf16": 1.6e-2}


def to_half(dt, x):
    """float32 -> the storage of dt ('f16': float16; 'bf16': bfloat16 bits in uint16)."""
    return x.astype(np.float16) if dt == "f16" else camdelta.to_bf16(x)


def from_half(dt, x):
    """The storage of dt -> float32 (exact)."""
    return x.astype(np.float32) if dt == "f16" else camdelta.from_bf16(x)


def _poisoned(shape, dtype):
    a = np.empty(shape, dtype)
    a.fill(np.nan if np.issubdtype(a.dtype, np.floating) else np.iinfo(a.dtype).max)
    return a


@pytest.fixture(autouse=True)
def poison_outputs(monkeypatch):
    monkeypatch.setattr(ops, "_empty", _poisoned)


@pytest.fixture(scope="session")
def ctx():
    return camdelta.default_context()


class Inputs:
    """Reproducible random inputs of the layouts of docs/math.md §1."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def normal(self, *shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def uniform(self, lo, hi, *shape):
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    def prep(self, B, N, H, D):
        """The prep's inputs (f32) as keyword arguments besides q_raw, k_raw, v_raw."""
        return dict(q_norm_weight=self.uniform(0.5, 1.5, H * D), k_norm_weight=self.uniform(0.5, 1.5, H * D),
                    proj_q=self.normal(B, N, 4, 4, scale=0.5), proj_kv=self.normal(B, N, 4, 4, scale=0.5),
                    rope_cos=self.uniform(-1, 1, N, D // 2), rope_sin=self.uniform(-1, 1, N, D // 2),
                    k_scale=float((D * 4) ** -0.5), norm_eps=1e-6)

    def scan(self, B, H, D, F, S):
        """q, k, v, beta, decay of a scan; keys scaled as the prep makes them (|k| about 1)."""
        N = F * S
        return (self.normal(B, H, D, N), self.normal(B, H, D, N, scale=D ** -0.5), self.normal(B, H, D, N),
                self.uniform(0.1, 0.9, B, H, F, S) / S, self.uniform(0.5, 1.0, B, H, F))

    def cameras(self, B, T, Hs, Ws, ph=1, pw=1):
        """camera_conditions (B, T, 20): random rotations and positions, focal lengths and centres about the
        image's size and middle."""
        cc = np.zeros((B, T, 20), np.float64)
        Wi, Hi = Ws * pw, Hs * ph
        for b in range(B):
            for t in range(T):
                a, bb, c, d = self.rng.standard_normal(4) / 1.0
                n = np.sqrt(a * a + bb * bb + c * c + d * d)
                a, bb, c, d = a / n, bb / n, c / n, d / n
                R = np.array([[a * a + bb * bb - c * c - d * d, 2 * (bb * c - a * d), 2 * (bb * d + a * c)],
                              [2 * (bb * c + a * d), a * a - bb * bb + c * c - d * d, 2 * (c * d - a * bb)],
                              [2 * (bb * d - a * c), 2 * (c * d + a * bb), a * a - bb * bb - c * c + d * d]])
                M = np.eye(4)
                M[:3, :3] = R
                M[:3, 3] = self.rng.uniform(-3, 3, 3)
                cc[b, t, :16] = M.reshape(-1)
                cc[b, t, 16:] = (self.rng.uniform(0.6, 1.4) * Wi, self.rng.uniform(0.6, 1.4) * Hi,
                                 Wi * self.rng.uniform(0.4, 0.6), Hi * self.rng.uniform(0.4, 0.6))
        return cc.astype(np.float32)


@pytest.fixture
def inputs():
    return Inputs(1234)
