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


def test_a_blocks_speed_runs_pack_those_runs_only():
    """`speed_runs: {packed: [...]}` makes the named runs packed runs (their own identity) and leaves the block's other
    runs, and so their committed records, as they were; a pattern naming no run, or an option the schema does not
    know, is refused by its key."""
    from embinit.workflow.checks import ConfigError, check
    from embinit.workflow.config import load, violations
    from embinit.workflow.specs import train_spec
    from test_config import SCHEMA, _config

    block = {"task": "multi30k", "sources": {"encoder": None, "decoder": None}, "dim": 300, "epochs": 20,
             "batch_size": 64, "seeds": 3, "family": "GloVe", "initializers": ["Xavier"]}  # fmt: skip

    def config(speed_runs):
        return _config({"blocks": {"paper": block | {"speed_runs": speed_runs}}, "initializers": ["Xavier"]})

    plain, packed = config({}), config({"packed": ["Xavier/seed2/nopos*"]})
    runs = [(seed, variant) for seed in (0, 1, 2) for variant in ("nopos", "nopos_frozen", "frozen", "base")]
    spec = {
        (c, run): train_spec(cfg, "paper", "Xavier", *run, False)
        for c, cfg in (("plain", plain), ("packed", packed))
        for run in runs
    }
    for run in runs:
        before, after = spec["plain", run], spec["packed", run]
        if run in [(2, "nopos"), (2, "nopos_frozen")]:
            assert after.speed_options == {"packed": True} and after.speed("packed") and after.digest != before.digest
        else:
            assert after == before and after.digest == before.digest
    with pytest.raises(ConfigError, match=r"blocks\.paper\.speed_runs\.packed\[1\]: 'Xavier/seed3/\*' names none"):
        check(config({"packed": ["Xavier/seed2/nopos*", "Xavier/seed3/*"]}))
    assert any("pakced" in v for v in violations(load(SCHEMA), config({"pakced": ["Xavier/seed2/*"]})))
