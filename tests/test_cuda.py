"""On a GPU: a training step, a killed run's resume and greedy decoding on CUDA, and no wait for the device inside a
training step (torch's sync debug mode). Every test here is marked `cuda`: where torch has no CUDA, tests/conftest.py
skips it, saying so. tests/test_step_policy.py checks the same code path on the CPU."""

import numpy as np
import pandas as pd
import pytest
import torch

from embinit.data.vocab import EOS, PAD
from embinit.models import ModelConfig, Translator
from embinit.training import Placement, checkpoint, loop
from embinit.training.batching import pad
from embinit.training.device import CPU_STEPS, CUDA_STEPS
from embinit.training.epoch import adam, batch_loss, train_step
from test_step_policy import ADAM, matrix, models, sentences
from test_train import Killed, job_of, make_spec, metric_values, selected, toy  # noqa: F401 (toy: a fixture)

pytestmark = pytest.mark.cuda
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("kind", ["translator", "classifier"])
def test_a_cuda_step_gives_the_cpu_steps_loss_and_gradients(kind):
    """The CUDA path (library loss, pinned copies) on the GPU against the CPU path on the CPU, from the same
    weights, without dropout."""
    torch.manual_seed(0)
    model, batch = models()[kind]
    model.eval()
    results = {}
    for device, policy in ((CPU, CPU_STEPS), (CUDA, CUDA_STEPS)):
        model.to(device).zero_grad(set_to_none=True)
        loss, n = batch_loss(model, batch, device, policy)
        (loss / n).backward()
        # copies: the CPU pass's grads are the tensors that model.to(CUDA) then moves in place
        grads = {k: p.grad.detach().to(CPU, copy=True) for k, p in model.named_parameters() if p.grad is not None}
        results[device.type] = loss.item(), grads
    (cpu_loss, cpu_grads), (cuda_loss, cuda_grads) = results["cpu"], results["cuda"]
    assert cuda_loss == pytest.approx(cpu_loss, rel=1e-5)
    assert cuda_grads.keys() == cpu_grads.keys()
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(cuda_grads[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, k=name: f"{k}: {m}")


@pytest.mark.parametrize("kind", ["translator", "classifier"])
@pytest.mark.parametrize("bf16", [False, True])
def test_a_cuda_training_step_never_waits_for_the_device(kind, bf16):
    """torch.cuda.set_sync_debug_mode("error") raises at any synchronizing call (a value read back, a blocking
    copy); two steps run under it after a first one that made Adam's state and the allocators' pools."""
    torch.manual_seed(0)
    model, batch = models()[kind]
    model.to(CUDA).train()
    optimizer = adam(model, 1e-3, ADAM)
    train_step(model, optimizer, batch, CUDA, bf16, CUDA_STEPS)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [train_step(model, optimizer, batch, CUDA, bf16, CUDA_STEPS)[0] for _ in range(2)]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(torch.isfinite(loss) for loss in losses)


def test_a_killed_cuda_run_resumes_to_the_uninterrupted_result(toy, tmp_path, monkeypatch):  # noqa: F811
    """A toy translation run (bf16, validation BLEU and the mechanism metrics every epoch: greedy decoding on the
    device) killed after epoch 1 resumes to what the whole run gave, with deterministic kernels."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored after the runs set it
    placement = Placement("cuda", deterministic=True)
    save = checkpoint.save_checkpoint

    def save_then_die(path, state):
        save(path, state)
        raise Killed

    try:
        whole = loop.train_run(*job_of(make_spec(toy)), tmp_path / "whole", placement)
        monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
        with pytest.raises(Killed):
            loop.train_run(*job_of(make_spec(toy)), tmp_path / "killed", placement)
        monkeypatch.setattr(checkpoint, "save_checkpoint", save)
        resumed = loop.train_run(*job_of(make_spec(toy)), tmp_path / "killed", placement)
    finally:
        torch.use_deterministic_algorithms(False)
    assert whole["device"].startswith("cuda")
    assert "after epoch 1" in (tmp_path / "killed" / "train.log").read_text()
    pd.testing.assert_frame_equal(metric_values(tmp_path / "killed"), metric_values(tmp_path / "whole"))
    assert selected(resumed) == selected(whole)


def test_cuda_decoding_gives_the_cpu_sentences():
    """Greedy decoding on the GPU, asking whether all sentences ended every 8 steps, against the CPU's, in float64
    so that no near-tie of an untrained model's logits flips."""
    torch.manual_seed(0)
    model = Translator(matrix(60, 24, 0), matrix(70, 24, 1), ModelConfig(heads=4)).double().eval()
    with torch.no_grad():
        model.output.bias[EOS] = 3.0  # it ends its sentences, at different steps
    src = pad(sentences(np.random.default_rng(5), 7, 60))
    on_cpu = model.generate(src, max_extra=20)
    on_cuda = model.to(CUDA).generate(src.to(CUDA), 20, CUDA_STEPS.done_check_every).cpu()
    assert torch.equal(on_cuda[:, : on_cpu.size(1)], on_cpu)
    assert (on_cuda[:, on_cpu.size(1) :] == PAD).all()
