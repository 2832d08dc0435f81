"""What a run is scored by: greedy translations, classification accuracy, and BLEU two ways.

Paper BLEU (SPEC section 4) is corpus BLEU over the block's own tokens: the hypothesis is the decoder's
vocabulary tokens (the detokenizer file's `tokens`, <unk> kept), the reference the split's `ref_tokens`.
Standard sacreBLEU beside it scores detokenized text against the reference text (`ref`). Both references and
the detokenizer are files of the vocab stage (embinit.data.vocab).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from sacrebleu.metrics import BLEU

from embinit.data.vocab import BOS, EOS, PAD, Detokenizer, References
from embinit.models import Classifier, Translator
from embinit.training.batching import sorted_batches
from embinit.training.device import autocast, step_policy


@torch.no_grad()
def accuracy(model: Classifier, data, batch_size: int, device: torch.device, bf16: bool) -> float:
    """Share of `data` classified right: counted on the device and read once."""
    model.eval()
    policy = step_policy(device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    for indices in sorted_batches(data.lengths(), batch_size):
        ids, labels = policy.to_device(data.batch(indices), device)
        with autocast(device, bf16):
            correct += (model(ids).argmax(-1) == labels).sum()
    return correct.item() / len(data)


def translate(
    model: Translator, data, batch_size: int, device: torch.device, bf16: bool, max_extra: int
) -> list[list[int]]:
    """Greedy translations of every source sentence as decoder ids (<eos> and after cut), in the data's order."""
    model.eval()
    policy = step_policy(device)
    hypotheses: list[list[int]] = [[] for _ in range(len(data))]
    for indices in sorted_batches(data.lengths(), batch_size):
        src, _ = policy.to_device(data.batch(indices), device)
        with autocast(device, bf16):
            generated = model.generate(src, max_extra, policy.done_check_every).cpu().tolist()
        for i, ids in zip(indices, generated):
            hypotheses[i] = [t for t in (ids[: ids.index(EOS)] if EOS in ids else ids) if t != PAD]
    return hypotheses


def clean(text: str) -> str:
    """One line of BLEU input: whitespace runs (newlines included) become single spaces."""
    return " ".join(text.split())


def paper_bleu() -> BLEU:
    """The paper's BLEU (SPEC section 4): corpus BLEU over the block's own tokens, as the PyTorch Multi30k
    recipe computes it (torchtext's bleu_score: 4-grams, no smoothing); a perfect hypothesis scores 100."""
    return BLEU(tokenize="none", smooth_method="none")


class BleuTexts(NamedTuple):
    """One split's BLEU inputs, one sentence per line: tokens for paper BLEU, text for standard sacreBLEU."""

    tok_hyp: list[str]
    tok_ref: list[str]
    hyp: list[str]
    ref: list[str]


def bleu_texts(hypotheses: list[list[int]], references: References, detokenizer: Detokenizer) -> BleuTexts:
    """Hypotheses as the decoder's vocabulary tokens (<bos> dropped, <unk> kept) and as detokenized text; the
    references as the split's own tokens (`ref_tokens`) and text (`ref`)."""
    if len(hypotheses) != len(references.ref):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references.ref)} references")
    return BleuTexts(
        tok_hyp=[" ".join(detokenizer.tokens[i] for i in ids if i != BOS) for ids in hypotheses],
        tok_ref=[" ".join(tokens) for tokens in references.ref_tokens],
        hyp=[clean(detokenizer.detokenize(ids)) for ids in hypotheses],
        ref=[clean(text) for text in references.ref],
    )


def bleu_scores(texts: BleuTexts) -> dict:
    """Paper BLEU and standard detokenized sacreBLEU (13a), each with its sacreBLEU signature."""
    paper, standard = paper_bleu(), BLEU()
    return {
        "paper_bleu": paper.corpus_score(texts.tok_hyp, [texts.tok_ref]).score,
        "sacrebleu": standard.corpus_score(texts.hyp, [texts.ref]).score,
        "paper_bleu_signature": str(paper.get_signature()),
        "sacrebleu_signature": str(standard.get_signature()),
    }


def greedy_bleu(
    model: Translator,
    data,
    references: References,
    detokenizer: Detokenizer,
    batch_size: int,
    device: torch.device,
    bf16: bool,
    max_extra: int,
) -> tuple[BleuTexts, dict]:
    """Translate a split greedily and score it: its BLEU texts and `bleu_scores`."""
    texts = bleu_texts(translate(model, data, batch_size, device, bf16, max_extra), references, detokenizer)
    return texts, bleu_scores(texts)
