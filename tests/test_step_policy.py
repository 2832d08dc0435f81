"""The CUDA step path (embinit.training.device.StepPolicy), checked on the CPU: it computes what the CPU path
computes, and nothing in its step reads a value back from the device (issue 44)."""

import dataclasses

import numpy as np
import pytest
import torch

from embinit.data.vocab import BOS, EOS, PAD
from embinit.models import Classifier, ModelConfig, Translator
from embinit.training.batching import pad
from embinit.training.device import CPU_STEPS, CUDA_STEPS, autocast, step_policy
from embinit.training.epoch import adam, batch_loss, evaluate_loss, train_step

ADAM = {"adam_betas": [0.9, 0.98], "adam_eps": 1e-9}
CPU = torch.device("cpu")
# the CUDA policy on CPU tensors: everything but the pinned copy, which needs a CUDA driver
CUDA_ON_CPU = dataclasses.replace(CUDA_STEPS, pinned_copies=False)


def matrix(n, dim, seed):
    return np.random.default_rng(seed).uniform(-0.1, 0.1, size=(n, dim)).astype(np.float32)


def sentences(rng, count, words, shortest=2):
    return [np.array([BOS, *rng.integers(4, words, rng.integers(shortest, 12)), EOS]) for _ in range(count)]


def translation_batch(seed=0, count=8):
    rng = np.random.default_rng(seed)
    return pad(sentences(rng, count, 60)), pad(sentences(rng, count, 70))


def test_the_device_picks_the_policy():
    assert step_policy(torch.device("cpu")) == CPU_STEPS and step_policy(torch.device("cuda", 1)) == CUDA_STEPS
    assert CPU_STEPS.fused_loss and not CUDA_STEPS.fused_loss and CUDA_STEPS.pinned_copies


@pytest.mark.parametrize("bf16", [False, True])
def test_the_library_loss_gives_the_fused_losss_value_and_gradients(bf16):
    """One F.cross_entropy over the padded logits (CUDA) against the fused chunked loss over real tokens (CPU), on
    one batch whose targets are padded, from the same weights; bf16: under (CPU) autocast, as CUDA runs do, where
    the paths' fp32 rounding can flip a bf16 rounding upstream, so gradients agree to bf16's precision."""
    torch.manual_seed(0)
    model = Translator(matrix(60, 24, 0), matrix(70, 24, 1), ModelConfig(heads=4, dropout=0.0))
    batch = translation_batch()
    assert (batch[1] == PAD).any()  # padded positions the two paths treat differently
    grads = {}
    for policy in (CPU_STEPS, CUDA_ON_CPU):
        model.zero_grad(set_to_none=True)
        with autocast(CPU, bf16):
            loss, n = batch_loss(model, batch, CPU, policy)
        (loss / n).backward()
        grads[policy] = loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}
    (fused, fused_grads), (library, library_grads) = grads[CPU_STEPS], grads[CUDA_ON_CPU]
    assert library.dtype == fused.dtype == torch.float32
    torch.testing.assert_close(library, fused, rtol=1e-6, atol=0.0)
    rtol = 1e-2 if bf16 else 1e-4  # bf16 keeps 8 bits: 4e-3 relative
    for name, grad in fused_grads.items():
        atol = rtol * float(grad.abs().max()) if bf16 else 1e-7
        torch.testing.assert_close(library_grads[name], grad, rtol=rtol, atol=atol, msg=lambda m, k=name: f"{k}: {m}")


# what reads a tensor back to the host (on CUDA each waits for the device): called in a step, they raise
HOST_READS = {
    torch.Tensor: ["item", "tolist", "nonzero", "cpu", "__bool__", "__int__", "__float__", "__index__"],
    torch: ["nonzero", "masked_select", "unique"],
}


@pytest.fixture
def host_reads_raise(monkeypatch):
    """Turns the host reads on (each raises, naming itself) for the block `with host_reads_raise():`."""

    def raiser(name):
        def read(*args, **kwargs):
            raise AssertionError(f"{name} read a value back to the host inside the step")

        return read

    class Guard:
        def __enter__(self):
            for owner, names in HOST_READS.items():
                for name in names:
                    monkeypatch.setattr(owner, name, raiser(name))

        def __exit__(self, *exc):
            monkeypatch.undo()

    return Guard


def models():
    config = ModelConfig(heads=4, dropout=0.1)
    rng = np.random.default_rng(3)
    ids = pad(sentences(rng, 6, 60))
    return {
        "translator": (Translator(matrix(60, 24, 0), matrix(70, 24, 1), config), translation_batch(1)),
        "classifier": (Classifier(matrix(60, 24, 0), 3, config), (ids, torch.tensor([0, 2, 1, 1, 0, 2]))),
    }


@pytest.mark.parametrize("kind", ["translator", "classifier"])
@pytest.mark.parametrize("bf16", [False, True])
def test_a_step_on_the_cuda_policy_reads_nothing_back(kind, bf16, host_reads_raise):
    """A training step of the CUDA policy (forced on CPU tensors) calls none of HOST_READS: on a GPU nothing in it
    waits for the device. tests/test_cuda.py checks the same with torch's sync debug mode where CUDA exists."""
    model, batch = models()[kind]
    model.train()
    optimizer = adam(model, 1e-3, ADAM)
    train_step(model, optimizer, batch, CPU, bf16, CUDA_ON_CPU)  # the first step makes Adam's state
    before = [p.detach().clone() for p in model.parameters()]
    with host_reads_raise():
        loss, n = train_step(model, optimizer, batch, CPU, bf16, CUDA_ON_CPU)
    assert torch.isfinite(loss) and n > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))  # the step stepped


def test_the_guard_catches_the_cpu_policys_read_back(host_reads_raise):
    """Not a vacuous guard: the CPU path's fused loss counts the real tokens on the host (nonzero)."""
    model, batch = models()["translator"]
    optimizer = adam(model, 1e-3, ADAM)
    with host_reads_raise(), pytest.raises(AssertionError, match="nonzero read a value back"):
        train_step(model, optimizer, batch, CPU, False, CPU_STEPS)


class Batches:
    """A dataset stand-in: fixed batches by index (evaluate_loss asks for lengths and batches)."""

    def __init__(self, batches):
        self.batches = batches

    def lengths(self):
        return np.arange(len(self.batches))[:, None]

    def batch(self, indices):
        (i,) = indices
        return self.batches[i]


def test_validation_loss_summed_on_the_device_is_the_sum_of_its_batches_read_one_by_one():
    """The float64 device sum read once gives what adding each batch's loss as a Python float gave."""
    model, _ = models()["translator"]
    batches = Batches([translation_batch(seed) for seed in range(5)])
    model.eval()
    with torch.no_grad():
        expected, terms = 0.0, 0
        for b in batches.batches:
            loss, n = batch_loss(model, b, CPU)
            expected += loss.item()
            terms += n
    assert evaluate_loss(model, batches, 1, CPU, False) == expected / terms


def test_decoding_that_asks_every_k_steps_gives_the_same_sentences():
    """check_every = 8 (CUDA's) may run a few steps past the last <eos>: only <pad> columns follow."""
    model = Translator(matrix(60, 24, 0), matrix(70, 24, 1), ModelConfig(heads=4)).eval()
    with torch.no_grad():
        model.output.bias[EOS] = 3.0  # an untrained model that ends its sentences, at different steps
    src = pad(sentences(np.random.default_rng(5), 7, 60))
    every_step = model.generate(src, max_extra=20)
    every_eighth = model.generate(src, max_extra=20, check_every=CUDA_STEPS.done_check_every)
    assert every_step.size(1) < src.size(1) + 20  # it stopped early: the check matters
    assert torch.equal(every_eighth[:, : every_step.size(1)], every_step)
    assert (every_eighth[:, every_step.size(1) :] == PAD).all()
