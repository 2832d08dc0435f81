"""train.packed: a translator's position-wise layers on the real tokens only give the padded batch's loss and gradients
up to float rounding, under every position encoding; a packed run names it in its identity."""

import numpy as np
import pytest
import torch

from embinit.data.vocab import PAD
from embinit.models import ModelConfig, Translator
from embinit.training import loop
from test_train import CPU, job_of, make_spec, toy  # noqa: F401 (toy: the tiny data set, a fixture)


def batch(rng, rows, longest, vocab):
    """Right-padded (rows, longest) ids of random lengths 3 .. longest, one row of each end length at least."""
    ids = torch.full((rows, longest), PAD)
    for i, n in enumerate(rng.integers(3, longest + 1, rows)):
        ids[i, :n] = torch.from_numpy(rng.integers(4, vocab, n))
    ids[0, :] = torch.from_numpy(rng.integers(4, vocab, longest))
    return ids


@pytest.mark.parametrize("encoding", ["sinusoidal", "none", "rotary", "relative", "learned"])
@pytest.mark.parametrize("fused", [True, False])
def test_packed_loss_and_gradients_are_the_padded_ones(encoding, fused):
    rng = np.random.default_rng(0)
    torch.manual_seed(1)
    layers = [rng.normal(0, 0.3, (n, 48)).astype(np.float32) for n in (60, 70)]
    model = Translator(*layers, ModelConfig(heads=4, ffn_dim=64, pos_encoding=encoding, max_len=40)).eval()
    src, tgt = batch(rng, 6, 11, 60), batch(rng, 6, 13, 70)
    grads = []
    for packed in (False, True):
        model.zero_grad()
        loss = model.loss(src, tgt, fused=fused, packed=packed)
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (padded, want), (packed, got) = grads
    torch.testing.assert_close(packed, padded, rtol=1e-6, atol=0)
    assert want.keys() == got.keys()
    scale = max(float(g.abs().max()) for g in want.values())
    for name in want:  # the key biases' gradients are 0 but for rounding: compared at the gradients' scale
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-5 * scale, msg=name)


def test_a_packed_translation_run_trains_and_a_packed_classification_run_is_refused(toy, tmp_path):  # noqa: F811
    final = loop.train_run(*job_of(make_spec(toy, speed_options={"packed": True})), tmp_path / "mt", CPU)
    assert final["test_size"] == 16 and np.isfinite(final["best_valid_loss"])
    with pytest.raises(ValueError, match="train.packed is for translation runs, this one is classification"):
        loop.train_run(*job_of(make_spec(toy, "classification", speed_options={"packed": True})), tmp_path / "cls", CPU)
