"""One training run of the paper (SPEC section 4): train, evaluate every epoch, select, score.

Translation: teacher-forced cross-entropy; every epoch validation loss and, where an output plots it (spec
`valid_bleu`), greedy validation BLEU; the
lowest-validation-loss state is scored on the test split with the paper's BLEU (over the block's own tokens)
and with standard detokenized sacreBLEU. Classification: cross-entropy;
every epoch validation accuracy (and test accuracy where a test split exists: MNLI mismatched); the
best validation accuracy and its epoch are reported, and the best test accuracy with its own epoch.

A checkpoint after every epoch holds everything the next epoch depends on (weights, optimizer, every RNG,
the batch sampler's generator, the best state so far, the metric rows), so a killed run that restarts
continues exactly where it stopped. It also holds the run's identity (its settings and the sha256 of every
input file): a checkpoint of another identity, a corrupt one, or a finished one is discarded and the run
trains from scratch, so a rerun after any change gives what a fresh run gives. Only a run whose `epochs`
grew, with everything else identical, continues its finished checkpoint.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import json
import logging
import pkgutil
import random
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sacrebleu.metrics import BLEU
from tqdm import tqdm

from embinit.training.batching import BucketBatchSampler, load_dataset, sorted_batches
from embinit.io import atomic_path, sha256_of, write_text_atomic
from embinit.models import Classifier, ModelConfig, Translator
from embinit.data.vocab import BOS, EOS, PAD, SPECIALS

log = logging.getLogger(__name__)

FINITE_CHECK_EVERY = 50  # steps between loss checks (each one waits for the GPU)


def run_name(run: dict) -> str:
    return f"{run['block']}/{run['initializer']}/seed{run['seed']}/{run['variant']}"


def pick_device(setting: str = "auto") -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def autocast(device: torch.device, bf16: bool):
    """bf16 autocast when asked. Runs ask for it only on CUDA (`train.bf16`); the tests also use it on the CPU,
    so the mixed-precision path is exercised without a GPU."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def build_model(spec: dict, embeddings: dict[str, np.ndarray]) -> nn.Module:
    config = ModelConfig.from_config(spec["model"], spec["variant"], embeddings["encoder"].shape[1])
    if spec["kind"] == "translation":
        return Translator(embeddings["encoder"], embeddings["decoder"], config)
    return Classifier(embeddings["encoder"], spec["num_classes"], config)


def batch_loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: torch.device
) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy of one (CPU) batch and its number of terms: target tokens or examples."""
    inputs, targets = batch
    # counted on the CPU copy: no device sync
    terms = int((targets[:, 1:] != PAD).sum()) if isinstance(model, Translator) else len(targets)
    return model.loss(inputs.to(device), targets.to(device)), terms


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


def check_finite(value: float, name: str, epoch: int, what: str) -> None:
    if not np.isfinite(value):
        raise FloatingPointError(f"run {name}: {what} became {value} in epoch {epoch}")


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data,
    batches: Iterable[np.ndarray],
    device: torch.device,
    bf16: bool,
    name: str = "",
    epoch: int = 0,
) -> tuple[float, int]:
    """One pass of Adam steps over `batches`; returns (mean loss per term, real non-pad tokens seen)."""
    model.train()
    lengths = data.lengths()
    loss_sum = torch.zeros((), device=device)
    terms = tokens = 0
    progress = tqdm(batches, desc=f"{name} epoch {epoch}", file=sys.stderr, leave=False, mininterval=10)
    for step, indices in enumerate(progress, start=1):
        with autocast(device, bf16):
            loss, n = batch_loss(model, data.batch(indices), device)
        optimizer.zero_grad(set_to_none=True)
        (loss / n).backward()
        optimizer.step()
        loss_sum += loss.detach()
        terms += n
        tokens += int(lengths[indices].sum())
        if step % FINITE_CHECK_EVERY == 0:
            check_finite(loss_sum.item(), name, epoch, "training loss")
            progress.set_postfix(loss=f"{loss_sum.item() / terms:.3f}")
    check_finite(loss_sum.item(), name, epoch, "training loss")
    return loss_sum.item() / terms, tokens


@torch.no_grad()
def evaluate_loss(model: nn.Module, data, batch_size: int, device: torch.device, bf16: bool) -> float:
    model.eval()
    loss_sum, terms = 0.0, 0
    for indices in sorted_batches(data.lengths(), batch_size):
        with autocast(device, bf16):
            loss, n = batch_loss(model, data.batch(indices), device)
        loss_sum += loss.item()
        terms += n
    return loss_sum / terms


@torch.no_grad()
def accuracy(model: Classifier, data, batch_size: int, device: torch.device, bf16: bool) -> float:
    model.eval()
    correct = 0
    for indices in sorted_batches(data.lengths(), batch_size):
        ids, labels = data.batch(indices)
        with autocast(device, bf16):
            predicted = model(ids.to(device)).argmax(-1).cpu()
        correct += int((predicted == labels).sum())
    return correct / len(data)


def clean(text: str) -> str:
    """One line of BLEU input: whitespace runs (newlines included) become single spaces."""
    return " ".join(text.split())


def translate(
    model: Translator, data, batch_size: int, device: torch.device, bf16: bool, max_extra: int
) -> list[list[int]]:
    """Greedy translations of every source sentence as decoder ids (<eos> and after cut), in the data's order."""
    model.eval()
    hypotheses: list[list[int]] = [[] for _ in range(len(data))]
    for indices in sorted_batches(data.lengths(), batch_size):
        src, _ = data.batch(indices)
        with autocast(device, bf16):
            generated = model.generate(src.to(device), max_extra).cpu().tolist()
        for i, ids in zip(indices, generated):
            hypotheses[i] = [t for t in (ids[: ids.index(EOS)] if EOS in ids else ids) if t != PAD]
    return hypotheses


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


def bleu_texts(
    hypotheses: list[list[int]], data, vocab_tokens: Sequence[str], detokenize: Callable[[Sequence[int]], str]
) -> BleuTexts:
    """Hypotheses as the decoder's vocabulary tokens (<unk> kept) and as detokenized text; the references
    as the split's own tokens (`ref_tokens`) and text (`ref`)."""
    return BleuTexts(
        tok_hyp=[" ".join(vocab_tokens[i] for i in ids if i != BOS) for ids in hypotheses],
        tok_ref=[" ".join(tokens) for tokens in data.ref_tokens],
        hyp=[clean(detokenize(ids)) for ids in hypotheses],
        ref=[clean(text) for text in data.ref],
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


def vocabulary_detokenizer(tokens: Sequence[str]) -> Callable[[Sequence[int]], str]:
    """Default detokenizer: the vocabulary tokens of the ids joined by spaces, specials skipped."""
    return lambda ids: " ".join(tokens[i] for i in ids if i >= len(SPECIALS))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every RNG's state as tensors and plain values, so the checkpoint loads with weights_only=True."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def setup_of(spec: dict) -> dict:
    """The settings a checkpoint must agree with: all but file paths, epochs and where the run runs."""
    machine = ("device", "num_threads")
    return json.loads(
        json.dumps(
            {
                "kind": spec["kind"],
                "run": spec["run"],
                "model": spec["model"],
                "variant": spec["variant"],
                "train": {k: v for k, v in spec["train"].items() if k not in machine},
                "batch_size": spec["batch_size"],
                "lr": spec["lr"],
                "seed": spec["seed"],
                "valid_bleu": spec.get("valid_bleu"),
                "num_classes": spec.get("num_classes"),
            },
            sort_keys=True,
        )
    )


def input_files(spec: dict) -> dict[str, str]:
    """Every file the run reads, by role: tokenized splits, embedding layers, vocabularies, tokenizer."""
    files = {
        f"{group}.{role}": path
        for group in ("data", "embeddings", "vocab")
        for role, path in spec.get(group, {}).items()
        if path
    }
    if spec.get("tokenizer_file"):
        files["tokenizer_file"] = spec["tokenizer_file"]
    return files


def training_modules() -> list:
    """The code a run's result depends on: every module of embinit.training and embinit.models, and every
    embinit module those import (position tables, vocabulary specials, ...), followed through their imports."""
    import embinit.models
    import embinit.training

    names = [p.__name__ for p in (embinit.training, embinit.models)]
    names += [
        f"{p.__name__}.{m.name}" for p in (embinit.training, embinit.models) for m in pkgutil.iter_modules(p.__path__)
    ]
    found = {}
    while names:
        name = names.pop()
        if name in found:
            continue
        found[name] = importlib.import_module(name)
        for node in ast.walk(ast.parse(inspect.getsource(found[name]))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embinit"):
                names.append(node.module)
            elif isinstance(node, ast.Import):
                names += [alias.name for alias in node.names if alias.name.startswith("embinit")]
    return [found[name] for name in sorted(found)]


def code_digest() -> str:
    """sha256 of the training code (`training_modules`): a checkpoint of other code is stale."""
    return hashlib.sha256("".join(inspect.getsource(m) for m in training_modules()).encode()).hexdigest()


def identity_of(spec: dict) -> dict:
    """What makes two runs the same run: the settings, the training code and the content of every input."""
    return {
        "setup": {**setup_of(spec), "code": code_digest()},
        "inputs": {role: sha256_of(path) for role, path in input_files(spec).items()},
    }


def identity_differences(old: dict, new: dict) -> list[str]:
    """Names of the settings and input files in which two identities differ."""
    differ = [f"setting {k}" for k in sorted(new["setup"]) if old.get("setup", {}).get(k) != new["setup"][k]]
    return differ + [f"input {k}" for k in sorted(new["inputs"]) if old.get("inputs", {}).get(k) != new["inputs"][k]]


def resumable_checkpoint(path: Path, identity: dict, epochs: int, name: str) -> dict | None:
    """The checkpoint to continue from, or None to train from scratch.

    A checkpoint is a cache: one that is unreadable, belongs to other settings or inputs, is finished at
    `epochs` or beyond (a forced rerun), or has more epochs than asked is deleted with one log line saying
    why. One of the same run with fewer epochs (killed, or `epochs` grew) is continued.
    """
    if not path.exists():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, garbage, or a pickle of more than tensors and plain values
        log.warning(
            "discarding %s: it is unreadable (%s: %s); run %s trains from scratch",
            path,
            type(error).__name__,
            str(error).splitlines()[0] if str(error) else "",
            name,
        )
        path.unlink()
        return None
    differ = identity_differences(checkpoint.get("identity", {}), identity)
    if differ:
        why = f"it was written for other {', '.join(differ)}"
    elif checkpoint["finished"] and checkpoint["epoch"] >= epochs:
        why = f"the run had finished its {checkpoint['epoch']} epochs, so a rerun trains it again"
    elif checkpoint["epoch"] > epochs:
        why = f"it holds {checkpoint['epoch']} epochs, more than the {epochs} asked for"
    else:
        return checkpoint
    log.info("discarding %s: %s; run %s trains from scratch", path, why, name)
    path.unlink()
    return None


def save_checkpoint(path: Path, checkpoint: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)


def write_metrics(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)


def train_run(spec: dict, out_dir, detokenize: Callable[[Sequence[int]], str] | None = None) -> dict:
    """Train one (block, initializer, seed, variant) run into out_dir; returns what final.json holds.

    spec keys: kind ("translation" | "classification"); data {train, valid, test (None: no test split)}:
    tokenized parquet paths; embeddings {encoder, decoder (translation)}: N x D .npy the layers start from;
    vocab {decoder}: vocabulary parquet (its tokens are what paper BLEU scores); model: config `model`;
    train: config `train`; variant {pos_encoding, embedding_trainable}; epochs; batch_size; lr; seed;
    valid_bleu (translation: greedy validation BLEU every epoch, for Figure 1; validation loss always);
    num_classes (classification); run {block, task, initializer, seed, variant}; optional log (default
    out_dir/train.log), threads (used when train.num_threads is 0) and tokenizer_file (the sub-word
    tokenizer the detokenizer reads; part of the run's identity).

    Writes checkpoint.pt every epoch, then metrics.parquet, (translation) test.tok.hyp.txt / test.tok.ref.txt
    (paper BLEU's input) and test.hyp.txt / test.ref.txt (standard sacreBLEU's), and final.json last.
    Resumes from out_dir/checkpoint.pt when it is of the same identity and unfinished (see
    resumable_checkpoint). `detokenize` turns decoder ids into text for standard sacreBLEU (default:
    vocabulary tokens joined by spaces, specials skipped).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(spec.get("log") or out_dir / "train.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        return _train(spec, out_dir, detokenize)
    except Exception:
        log.exception("run %s failed", run_name(spec["run"]))
        raise
    finally:
        log.removeHandler(handler)
        handler.close()


def _train(spec: dict, out_dir: Path, detokenize: Callable[[Sequence[int]], str] | None) -> dict:
    run, train_cfg, kind = spec["run"], spec["train"], spec["kind"]
    name, translation = run_name(run), kind == "translation"
    threads = train_cfg.get("num_threads", 0) or spec.get("threads", 0)
    if threads > 0:
        torch.set_num_threads(threads)
    device = pick_device(train_cfg.get("device", "auto"))
    bf16 = bool(train_cfg.get("bf16", False)) and device.type == "cuda"
    batch_size, max_len = spec["batch_size"], spec["model"]["max_len"]
    seed_everything(spec["seed"])

    splits = {split: load_dataset(kind, path, max_len) for split, path in spec["data"].items() if path}
    embeddings = {side: np.load(path) for side, path in spec["embeddings"].items() if path}
    model = build_model(spec, embeddings).to(device)
    optimizer = adam(model, spec["lr"], train_cfg)
    generator = torch.Generator().manual_seed(spec["seed"])
    sampler = BucketBatchSampler(splits["train"].lengths(), batch_size, train_cfg["bucket_width"], generator)
    if translation:
        vocab_tokens = pd.read_parquet(spec["vocab"]["decoder"], columns=["token"])["token"].tolist()
        detokenize = detokenize or vocabulary_detokenizer(vocab_tokens)
    log.info(
        "run %s: %s, %d parameters, device %s, %d threads",
        name,
        kind,
        model.num_parameters(),
        device,
        torch.get_num_threads(),
    )

    checkpoint_path = out_dir / "checkpoint.pt"
    identity = identity_of(spec)
    rows, best_model, start = [], None, 1
    checkpoint = resumable_checkpoint(checkpoint_path, identity, spec["epochs"], name)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        generator.set_state(checkpoint["sampler"])
        set_rng_state(checkpoint["rng"])
        rows, best_model, start = checkpoint["rows"], checkpoint["best_model"], checkpoint["epoch"] + 1
        log.info("resuming %s after epoch %d", name, checkpoint["epoch"])

    for epoch in range(start, spec["epochs"] + 1):
        began = time.perf_counter()
        train_loss, tokens = train_epoch(model, optimizer, splits["train"], sampler, device, bf16, name, epoch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        train_seconds = time.perf_counter() - began
        row = {
            "epoch": epoch,
            "train_loss": train_loss,
            "valid_loss": evaluate_loss(model, splits["valid"], batch_size, device, bf16),
        }
        check_finite(row["valid_loss"], name, epoch, "validation loss")
        if translation:
            if spec.get("valid_bleu", True):
                hypotheses = translate(model, splits["valid"], batch_size, device, bf16, train_cfg["decode_max_extra"])
                scores = bleu_scores(bleu_texts(hypotheses, splits["valid"], vocab_tokens, detokenize))
                row["valid_paper_bleu"], row["valid_sacrebleu"] = scores["paper_bleu"], scores["sacrebleu"]
            if best_model is None or row["valid_loss"] < min(r["valid_loss"] for r in rows):
                best_model = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        else:
            row["valid_acc"] = accuracy(model, splits["valid"], batch_size, device, bf16)
            if "test" in splits:
                row["test_acc"] = accuracy(model, splits["test"], batch_size, device, bf16)
        row["train_seconds"] = train_seconds
        row["valid_seconds"] = time.perf_counter() - began - train_seconds
        row["tokens_per_second"] = tokens / train_seconds
        rows.append({k: float(v) if k != "epoch" else v for k, v in row.items()})
        log.info("%s epoch %d: %s", name, epoch, {k: round(v, 4) for k, v in row.items() if k != "epoch"})
        checkpoint = {
            "identity": identity,
            "epoch": epoch,
            "finished": False,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "sampler": generator.get_state(),
            "rng": rng_state(),
            "best_model": best_model,
            "rows": rows,
        }
        save_checkpoint(checkpoint_path, checkpoint)
    write_metrics(out_dir / "metrics.parquet", rows)

    if translation:
        best = min(rows, key=lambda r: r["valid_loss"])  # earliest epoch on ties
        model.load_state_dict(best_model)
        hypotheses = translate(model, splits["test"], batch_size, device, bf16, train_cfg["decode_max_extra"])
        texts = bleu_texts(hypotheses, splits["test"], vocab_tokens, detokenize)
        scores = bleu_scores(texts)
        selected = {
            "best_epoch": best["epoch"],
            "best_valid_loss": best["valid_loss"],
            "valid_paper_bleu": best.get("valid_paper_bleu"),
            "valid_sacrebleu": best.get("valid_sacrebleu"),
            "test_paper_bleu": scores["paper_bleu"],
            "test_sacrebleu": scores["sacrebleu"],
            "paper_bleu_signature": scores["paper_bleu_signature"],
            "sacrebleu_signature": scores["sacrebleu_signature"],
            "test_size": len(texts.ref),
        }
        for name, lines in texts._asdict().items():  # tok_hyp -> test.tok.hyp.txt, hyp -> test.hyp.txt
            write_text_atomic(out_dir / f"test.{name.replace('_', '.')}.txt", "".join(f"{x}\n" for x in lines))
    else:
        best = max(rows, key=lambda r: r["valid_acc"])  # earliest epoch on ties
        selected = {
            "best_epoch": best["epoch"],
            "best_valid_acc": best["valid_acc"],
            "best_valid_loss": min(r["valid_loss"] for r in rows),
        }
        if "test_acc" in best:  # MNLI mismatched: its own best epoch, as the paper reports it
            best_test = max(rows, key=lambda r: r["test_acc"])
            selected.update(best_test_acc=best_test["test_acc"], best_test_epoch=best_test["epoch"])

    final = {
        **run,
        "kind": kind,
        **selected,
        "params": model.num_parameters(),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "train_minutes_per_epoch": float(np.mean([r["train_seconds"] for r in rows])) / 60,
        "valid_minutes_per_epoch": float(np.mean([r["valid_seconds"] for r in rows])) / 60,
        "vocab_sizes": {side: int(e.shape[0]) for side, e in embeddings.items()},
        "embedding_dim": int(embeddings["encoder"].shape[1]),
        "train_size": len(splits["train"]),
        "epochs": spec["epochs"],
        "batch_size": batch_size,
        "lr": spec["lr"],
        "device": _describe(device),
        "pos_encoding": spec["variant"]["pos_encoding"],
        "embedding_trainable": spec["variant"]["embedding_trainable"],
    }
    write_text_atomic(out_dir / "final.json", json.dumps(final, indent=2) + "\n")
    save_checkpoint(checkpoint_path, {**checkpoint, "finished": True})
    log.info("run %s done: %s", name, selected)
    return final


def _describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
