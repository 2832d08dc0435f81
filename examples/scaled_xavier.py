"""An extension initializer: config `extensions: [examples/scaled_xavier.py]`, its name `Xavier_Scaled` in
`initializers` (and a block's), optionally `initializer_params: {Xavier_Scaled: {scale: 3.0}}`."""

import numpy as np

from embinit.layers.initializers import register, xavier_bound


@register("Xavier_Scaled", reads_pretrained=False)  # needs only the layer's shape
def xavier_scaled(pretrained, shape, rng, scale: float = 2.0):
    """Uniform on [-a, a] with a = scale * sqrt(6 / (N + D)): Xavier's bound times `scale`."""
    a = scale * xavier_bound(*shape)
    return rng.uniform(-a, a, size=shape).astype(np.float32)
