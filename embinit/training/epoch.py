"""One epoch of a run: the model and its optimizer, the training pass (Adam steps over batches; one loop for a run
alone and for the runs of a stack, embinit.training.stacked) and the validation loss."""

from __future__ import annotations

import sys
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
from tqdm import tqdm

from embinit.models import Classifier, ModelConfig, Translator
from embinit.training.batching import sorted_batches
from embinit.training.device import StepPolicy, autocast, step_policy
from embinit.training.spec import RunSpec

FINITE_CHECK_EVERY = 50  # steps between loss checks (each one waits for the GPU)


def build_model(spec: RunSpec, embeddings: dict[str, np.ndarray]) -> nn.Module:
    config = ModelConfig.from_config(spec.model, spec.variant, embeddings["encoder"].shape[1])
    if spec.translation:
        return Translator(embeddings["encoder"], embeddings["decoder"], config)
    return Classifier(embeddings["encoder"], spec.num_classes, config)


def adam(model: nn.Module, lr: float, train_cfg: dict) -> torch.optim.Adam:
    """Adam over the trainable parameters, as one fused kernel per step on the CPU and CUDA alike (torch's
    CPU default is a loop of about ten operations per parameter tensor; docs/performance.md)."""
    return torch.optim.Adam(
        [p for p in model.parameters() if p.requires_grad],
        lr=lr,
        betas=tuple(train_cfg["adam_betas"]),
        eps=train_cfg["adam_eps"],
        fused=True,
    )


def compile_loss(model: nn.Module) -> Callable[..., torch.Tensor]:
    """The model's `loss` compiled by torch.compile, for the training steps (`train.compile`). The module stays itself:
    its state_dict keys, and the eager passes of evaluation, decoding and the mechanism probe (whose `weights_sink` a
    compiled graph would not fill). dynamic=True: one graph for every batch shape from the first step, so a resumed
    run runs the kernels the uninterrupted one ran; fallback_random: eager's dropout masks (inductor would draw its
    own), so a compiled step differs from an eager one by rounding only."""
    try:
        return torch.compile(model.loss, dynamic=True, options={"fallback_random": True})
    except RuntimeError as error:  # torch's words: this Python or platform has no torch.compile
        raise RuntimeError(f"train.compile: true, but {error}; set train.compile: false") from error


def batch_loss(
    model: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    device: torch.device,
    policy: StepPolicy | None = None,
    compiled_loss: Callable[..., torch.Tensor] | None = None,
    packed: bool = False,
) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy of one host batch (on the device) and its number of terms: target tokens or examples.
    `policy`: how the step runs, the device's own by default (embinit.training.device.step_policy); `compiled_loss`:
    the model's loss as `compile_loss` gives it, run in place of its own `loss` (None: eager); `packed`: a
    translator's position-wise layers on the real tokens only (`train.packed`)."""
    policy = policy or step_policy(device)
    terms = model.loss_terms(batch[1])  # counted on the host copy: no device sync
    options = {"packed": True} if packed else {}
    return (compiled_loss or model.loss)(*policy.to_device(batch, device), fused=policy.fused_loss, **options), terms


def check_finite(value: float, name: str, epoch: int, what: str) -> None:
    if not np.isfinite(value):
        raise FloatingPointError(f"run {name}: {what} became {value} in epoch {epoch}")


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple[torch.Tensor, torch.Tensor],
    device: torch.device,
    bf16: bool,
    policy: StepPolicy,
    compiled_loss: Callable[..., torch.Tensor] | None = None,
    packed: bool = False,
) -> tuple[torch.Tensor, int]:
    """One Adam step on one host batch: its summed loss, left on the device (reading it would wait for the
    device), and its number of terms."""
    with autocast(device, bf16):
        loss, n = batch_loss(model, batch, device, policy, compiled_loss, packed)
    optimizer.zero_grad(set_to_none=True)
    (loss / n).backward()
    optimizer.step()
    return loss.detach(), n


def train_pass(
    step: Callable[[list], tuple[torch.Tensor, list[int]]],
    datas: list,
    orders: list[Sequence[np.ndarray]],
    device: torch.device,
    name: str,
    epoch: int,
) -> list[tuple[float, int]]:
    """The epoch loop of k runs in step (a run alone: k = 1), each over its own batch order of its own data: `step`
    takes their k host batches, steps each run once and gives back their summed losses (k,), left on the device, and
    their numbers of terms. Returns each run's (mean loss per term, real non-pad tokens seen); it stops early once no
    run's loss is finite (a sum of losses stays so), for the caller to check."""
    steps = {len(order) for order in orders}
    if len(steps) > 1:
        raise ValueError(f"the runs of a stack take different numbers of steps an epoch: {sorted(steps)}")
    k, lengths = len(datas), [data.lengths() for data in datas]
    loss_sum = torch.zeros(k, device=device)
    terms, tokens = [0] * k, [0] * k
    progress = tqdm(
        zip(*orders), total=steps.pop(), desc=f"{name} epoch {epoch}", file=sys.stderr, leave=False, mininterval=10
    )
    for done, indices in enumerate(progress, start=1):
        losses, n = step([data.batch(i) for data, i in zip(datas, indices)])
        loss_sum += losses
        for i in range(k):
            terms[i] += n[i]
            tokens[i] += int(lengths[i][indices[i]].sum())
        if done % FINITE_CHECK_EVERY == 0:  # each check waits for the device
            sums = loss_sum.tolist()
            if not np.isfinite(sums).any():
                break
            progress.set_postfix(loss=" ".join(f"{s / t:.3f}" for s, t in zip(sums, terms)))
    return [(s / t, n) for s, t, n in zip(loss_sum.tolist(), terms, tokens)]


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data,
    batches: Sequence[np.ndarray],
    device: torch.device,
    bf16: bool,
    name: str = "",
    epoch: int = 0,
    compiled_loss: Callable[..., torch.Tensor] | None = None,
    packed: bool = False,
) -> tuple[float, int]:
    """One pass of Adam steps over `batches` (`compiled_loss`: see `compile_loss`; None: eager; `packed`: see
    `batch_loss`); returns (mean loss per term, real non-pad tokens seen)."""
    model.train()
    policy = step_policy(device, compiled=compiled_loss is not None)

    def step(batches):
        loss, n = train_step(model, optimizer, batches[0], device, bf16, policy, compiled_loss, packed)
        return loss, [n]

    ((loss, tokens),) = train_pass(step, [data], [batches], device, name, epoch)
    check_finite(loss, name, epoch, "training loss")
    return loss, tokens


@torch.no_grad()
def evaluate_loss(model: nn.Module, data, batch_size: int, device: torch.device, bf16: bool) -> float:
    """Mean loss per term over `data`: summed on the device and read once (float64, so the sum is the one Python's
    floats would give)."""
    model.eval()
    policy = step_policy(device)
    loss_sum, terms = torch.zeros((), dtype=torch.float64, device=device), 0
    for indices in sorted_batches(data.lengths(), batch_size):
        with autocast(device, bf16):
            loss, n = batch_loss(model, data.batch(indices), device, policy)
        loss_sum += loss
        terms += n
    return loss_sum.item() / terms
