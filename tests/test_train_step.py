"""The lean training step computes what the step it replaced computed (issue: fast decoding and a lean step).

Reference = the old step: full (B, T, N) logits, F.cross_entropy with ignore_index, SDPA, torch's default
Adam. With dropout off the two must give the same losses and weights to fp32 rounding.
"""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from embinit.training.batching import pad
from embinit.models import Classifier, ModelConfig, Translator
from embinit.models.loss import linear_cross_entropy
from embinit.training.device import autocast
from embinit.training.epoch import adam, batch_loss
from embinit.data.vocab import BOS, EOS, PAD

ADAM = {"adam_betas": [0.9, 0.98], "adam_eps": 1e-9}
CPU = torch.device("cpu")


def matrix(n, dim, seed):
    return np.random.default_rng(seed).uniform(-0.1, 0.1, size=(n, dim)).astype(np.float32)


def random_pairs(rng, count, n_src, n_tgt):
    src = [np.array([BOS, *rng.integers(4, n_src, rng.integers(2, 12)), EOS]) for _ in range(count)]
    tgt = [np.array([BOS, *rng.integers(4, n_tgt, rng.integers(2, 12)), EOS]) for _ in range(count)]
    return pad(src), pad(tgt)


@pytest.mark.parametrize("rows", [1, 7, 64, 200])
def test_linear_cross_entropy_matches_the_full_logits_loss_and_gradients(rows):
    gen = torch.Generator().manual_seed(rows)
    h = torch.randn(rows, 12, generator=gen, requires_grad=True)
    weight = torch.randn(50, 12, generator=gen, requires_grad=True)
    bias = torch.randn(50, generator=gen, requires_grad=True)
    gold = torch.randint(0, 50, (rows,), generator=gen)
    expected = F.cross_entropy(F.linear(h, weight, bias), gold, reduction="sum")
    (expected * 0.37).backward()
    reference = [t.grad.clone() for t in (h, weight, bias)]
    for t in (h, weight, bias):
        t.grad = None
    loss = linear_cross_entropy(h, weight, bias, gold, chunk_rows=16)
    (loss * 0.37).backward()
    torch.testing.assert_close(loss, expected)
    for got, want in zip((h.grad, weight.grad, bias.grad), reference):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(h, weight, bias, gold, chunk_rows=16), expected)


def test_attention_with_the_cheap_dropout_mask_is_sdpa_when_nothing_is_dropped():
    model = Translator(matrix(30, 16, 0), matrix(40, 16, 1), ModelConfig(heads=4, dropout=0.0))
    attention = model.decoder[0].self_attention
    x = torch.randn(3, 7, 16)
    q, (k, v) = attention.split(attention.query(x)), attention.keys_values(x)
    keep = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    keep[0, ..., 5:] = False
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal)
        torch.testing.assert_close(attention._attend_with_cheap_dropout(q, k, v, keep, causal), expected)


def test_attention_dropout_drops_weights_in_training_only():
    model = Translator(matrix(30, 16, 0), matrix(40, 16, 1), ModelConfig(heads=4, dropout=0.5))
    attention = model.encoder.layers[0].attention
    x = torch.randn(2, 9, 16)
    attention.eval()
    assert torch.equal(attention(x, x), attention(x, x))
    attention.train()
    torch.manual_seed(0)
    assert not torch.allclose(attention(x, x), attention(x, x))


def _old_step_losses(model, batches, steps):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9, foreach=False)
    losses = []
    for _ in range(steps):
        for src, tgt in batches:
            logits = model(src, tgt[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD, reduction="sum")
            optimizer.zero_grad(set_to_none=True)
            (loss / int((tgt[:, 1:] != PAD).sum())).backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def _new_step_losses(model, batches, steps):
    optimizer = adam(model, 1e-3, ADAM)
    losses = []
    for _ in range(steps):
        for batch in batches:
            loss, n = batch_loss(model, batch, CPU)
            optimizer.zero_grad(set_to_none=True)
            (loss / n).backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def test_lean_translation_step_gives_the_old_steps_losses_and_gradients_without_dropout():
    rng = np.random.default_rng(0)
    old = Translator(matrix(60, 20, 0), matrix(70, 20, 1), ModelConfig(heads=4, dropout=0.0))
    new = copy.deepcopy(old)
    batches = [random_pairs(rng, 8, 60, 70) for _ in range(3)]
    # the first step's gradients, before Adam's normalization can amplify rounding (a gradient that is 0 but
    # for rounding, as a key bias's, becomes a full-size step)
    probe_old, probe_new = copy.deepcopy(old), copy.deepcopy(old)
    loss, n = batch_loss(probe_new, batches[0], CPU)
    (loss / n).backward()
    _old_step_losses(probe_old, batches[:1], 1)
    for (name, a), b in zip(probe_old.named_parameters(), probe_new.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-7, msg=name)
    old_losses, new_losses = _old_step_losses(old, batches, 3), _new_step_losses(new, batches, 3)
    assert old_losses[-1] < 0.9 * old_losses[0]  # it learns: the comparison is not of two constant runs
    np.testing.assert_allclose(new_losses, old_losses, rtol=1e-5)


def test_classifier_loss_is_the_summed_cross_entropy():
    model = Classifier(matrix(30, 16, 0), 3, ModelConfig(heads=4, dropout=0.0))
    ids, labels = pad([np.array([BOS, 5, 6, EOS]), np.array([BOS, 7, EOS])]), torch.tensor([2, 0])
    loss, n = batch_loss(model, (ids, labels), CPU)
    assert n == 2
    torch.testing.assert_close(loss, F.cross_entropy(model(ids), labels, reduction="sum"))


def test_bf16_autocast_step_and_decoding_run_on_the_cpu():
    """The CUDA mixed-precision path, exercised through CPU autocast so that a dtype mistake shows here."""
    rng = np.random.default_rng(1)
    model = Translator(matrix(60, 16, 0), matrix(70, 16, 1), ModelConfig(heads=4))
    fp32 = copy.deepcopy(model)
    src, tgt = random_pairs(rng, 6, 60, 70)
    with autocast(CPU, True):
        loss, _ = batch_loss(model, (src, tgt), CPU)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
    model.eval(), fp32.eval()
    with autocast(CPU, True):
        bf16_loss, _ = batch_loss(model, (src, tgt), CPU)
        generated = model.generate(src, max_extra=5)
    assert generated.dtype == torch.long and generated.shape[0] == 6
    torch.testing.assert_close(bf16_loss, batch_loss(fp32, (src, tgt), CPU)[0], rtol=0.05, atol=0.0)
