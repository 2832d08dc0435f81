"""Cross-entropy of a linear output layer: the CPU's chunked fused loss, and the GPU's one library call.

The translator's output projection turns each decoder state into N_dec logits; for a batch that is an
(n, N_dec) matrix written, normalized, read back and differentiated in several passes over memory, which
on the CPU costs more than the projection's arithmetic (docs/performance.md). The loss is a sum over
rows, so each row's gradient is known as soon as its logits are: `linear_cross_entropy` walks the rows in
small chunks, computes the loss and the gradients of the chunk while its logits are still in cache, and
keeps only the gradients for the backward pass. Same values as F.cross_entropy(F.linear(h, W, b), gold,
reduction="sum") to fp32 rounding.

On a GPU memory traffic is cheap and each kernel launch and each wait for the device is dear: the chunks
cost about a dozen launches per 64 rows, and picking the real rows needs their count on the host.
`padded_cross_entropy` is one F.cross_entropy over every position, <pad> targets ignored, which never reads
a value back. embinit.training.device.StepPolicy says which one a device runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_ROWS = 64  # rows per chunk: 64 x 5,893 fp32 logits stay in a 2 MiB L2 cache (docs/performance.md)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, gold, chunk_rows):
        loss = h.new_zeros((), dtype=torch.float32)
        grad_h = torch.empty_like(h)
        grad_weight = torch.zeros_like(weight)
        grad_bias = torch.zeros_like(bias)
        rows = torch.arange(min(chunk_rows, h.size(0)), device=h.device)
        for start in range(0, h.size(0), chunk_rows):
            h_chunk, gold_chunk = h[start : start + chunk_rows], gold[start : start + chunk_rows]
            logits = torch.addmm(bias, h_chunk, weight.t())  # (c, N)
            lse = torch.logsumexp(logits, dim=1)  # (c,)
            loss += (lse - logits.gather(1, gold_chunk[:, None])[:, 0]).sum()
            grad_logits = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
            grad_logits[rows[: len(gold_chunk)], gold_chunk] -= 1  # d loss / d logits = softmax - one-hot
            torch.mm(grad_logits, weight, out=grad_h[start : start + chunk_rows])
            grad_weight.addmm_(grad_logits.t(), h_chunk)
            grad_bias += grad_logits.sum(0)
        ctx.save_for_backward(grad_h, grad_weight, grad_bias)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_weight, grad_bias = ctx.saved_tensors
        return grad_h * grad_loss, grad_weight * grad_loss, grad_bias * grad_loss, None, None


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, gold: torch.Tensor, chunk_rows: int = CHUNK_ROWS
) -> torch.Tensor:
    """Summed cross-entropy of the logits h @ weight.T + bias (h: (n, D), weight: (N, D)) against gold (n,).

    Runs in fp32 also under autocast, as the loss does in torch's own autocast policy.
    """
    with torch.autocast(h.device.type, enabled=False):
        h, weight, bias = h.float(), weight.float(), bias.float()
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad or bias.requires_grad):
            return _LinearCrossEntropy.apply(h, weight, bias, gold, chunk_rows)
        chunks = range(0, h.size(0), chunk_rows)
        return sum(
            (
                F.cross_entropy(
                    F.linear(h[i : i + chunk_rows], weight, bias), gold[i : i + chunk_rows], reduction="sum"
                )
                for i in chunks
            ),
            h.new_zeros(()),
        )


def padded_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, gold: torch.Tensor, ignore_index: int
) -> torch.Tensor:
    """Summed cross-entropy of the logits h @ weight.T + bias (h: (..., D)) against gold (...), targets equal to
    `ignore_index` left out: torch's own loss, in fp32 also under autocast as `linear_cross_entropy`."""
    with torch.autocast(h.device.type, enabled=False):
        logits = F.linear(h.float(), weight.float(), bias.float())  # (..., N)
        return F.cross_entropy(logits.flatten(0, -2), gold.flatten(), ignore_index=ignore_index, reduction="sum")
