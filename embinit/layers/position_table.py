"""Sinusoidal position encoding of Vaswani et al. (2017), shared by the models and the statistics tables."""

from __future__ import annotations

import numpy as np


def sinusoidal_table(max_len: int, dim: int, base: float = 10000) -> np.ndarray:
    """P[pos, 2i] = sin(pos / base^(2i/dim)), P[pos, 2i+1] = cos(pos / base^(2i/dim)); max_len x dim float32.

    The paper prints base 1000; Vaswani et al. use 10000 (config `model.pos_base`).
    """
    positions = np.arange(max_len, dtype=np.float64)[:, None]
    rates = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = positions * rates
    table = np.zeros((max_len, dim), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return table.astype(np.float32)
