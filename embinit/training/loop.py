"""One training run of the paper (SPEC section 4): train, evaluate every epoch, select, score.

Translation: teacher-forced cross-entropy; every epoch validation loss and, where an output plots it (spec
`valid_bleu`), greedy validation BLEU; the lowest-validation-loss state is scored on the test split with the
paper's BLEU (over the block's own tokens) and with standard detokenized sacreBLEU (embinit.training.scoring).
Classification: cross-entropy; every epoch validation accuracy (and test accuracy where a test split exists:
MNLI mismatched); the best validation accuracy and its epoch are reported, and the best test accuracy with its
own epoch.

Every epoch also measures the mechanism metrics (embinit.training.mechanism: embedding spread, how much the
scaled embedding outweighs the position encoding, attention entropy and saturation, gradient norms) unless
`train.mechanism` is off; they never change the run's trajectory. The input embeddings of the reported state
(translation: the selected epoch; classification: the best validation accuracy's) are a run output.

`train.compile` (a speed option, in the run's identity as `speed_options`) compiles the training steps' loss with
torch.compile (embinit.training.epoch.compile_loss); validation, decoding and the mechanism probe run the module eagerly.

Every epoch ends in a checkpoint, so a killed run continues where it stopped, and a checkpoint of another
identity (settings, code, input files) is discarded (embinit.training.checkpoint).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from embinit.data.vocab import Detokenizer, References, load_detokenizer, read_references
from embinit.io import atomic_path, disk_space, interrupted_writes, write_text_atomic
from embinit.training import checkpoint, mechanism, scoring
from embinit.training.batching import ClassificationData, Sampler, TranslationData, batch_sampler, load_dataset
from embinit.training.device import describe, place
from embinit.training.epoch import adam, build_model, check_finite, compile_loss, evaluate_loss, train_epoch
from embinit.training.placement import Placement
from embinit.training.spec import RunFiles, RunSpec
from embinit.training.stopping import Terminated, terminated_on_sigterm

log = logging.getLogger(__name__)
RUN_LOG = logging.getLogger("embinit.training")  # the run's log file: the lines of every training module


def train_run(spec: RunSpec, files: RunFiles, out_dir, placement: Placement = Placement()) -> dict:
    """Train one (block, initializer, seed, variant) run into out_dir; returns what final.json holds.

    `spec` (embinit.training.spec.RunSpec) is what the run is; `files` where its inputs lie: tokenized splits, the
    layers it starts from and, for translation, the decoder side's detokenizer (its tokens are what paper BLEU
    scores, its tokenizer detokenizes for standard sacreBLEU) and the references. Every input file's content is part
    of the run's identity (embinit.training.checkpoint.identity_of); `placement` (device, threads, determinism) is
    not: the run holds its device (a GPU slot) while it trains (embinit.training.device.place). The training steps'
    loss compiled (`speed_options` compile: embinit.training.epoch.compile_loss) or packed (packed) are speed
    options in its spec.

    Writes checkpoint.pt every epoch, then metrics.parquet, (translation) test.tok.hyp.txt / test.tok.ref.txt
    (paper BLEU's input) and test.hyp.txt / test.ref.txt (standard sacreBLEU's), embeddings.npz (the input
    embedding matrices of the reported state, keys `encoder` and, translation, `decoder`), and final.json last.
    train.mechanism (default true) adds the mechanism metrics to every epoch's row (embinit.training.mechanism;
    train.mechanism_probe: its number of validation sentences).
    Resumes from out_dir/checkpoint.pt when its sha256 sidecar vouches for it and it is of the same identity and
    unfinished (see embinit.training.checkpoint.resumable_checkpoint); first removes the temporary files a
    killed save left in out_dir. Stops before its first epoch when out_dir's disk lacks the space the run will write
    (`disk_needed`). Warnings also go to stderr, which Snakemake shows; SIGTERM ends the run with exit status 143 and
    a line saying how it resumes (embinit.training.stopping).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out_dir / "train.log", encoding="utf-8")
    shown = logging.StreamHandler(sys.stderr)  # the job's stderr, which Snakemake shows (a SLURM job: its log)
    shown.setLevel(logging.WARNING)
    shown.addFilter(lambda record: not record.exc_info)  # a failure's traceback reaches stderr as the exception
    for h in (handler, shown):
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        RUN_LOG.addHandler(h)
    RUN_LOG.setLevel(logging.INFO)
    try:
        with terminated_on_sigterm(), place(placement) as device:
            return _train(spec, files, out_dir, device)
    except Terminated as stop:
        log.error("%s", terminated(spec, out_dir, stop))
        raise
    except Exception:
        log.exception("run %s failed", spec.name)
        raise
    finally:
        for h in (handler, shown):
            RUN_LOG.removeHandler(h)
            h.close()


def terminated(spec: RunSpec, out_dir: Path, stop: Terminated) -> str:
    """What a run ended by a signal says: that nothing failed, and how it resumes."""
    path = out_dir / "checkpoint.pt"
    resumes = (
        f"resumes it from its last checkpoint ({path})"
        if checkpoint.digest_path(path).exists()
        else "starts it afresh (no epoch had finished)"
    )
    return (
        f"run {spec.name} was terminated by signal {stop.signal.name} (a time limit, kill, or the "
        f"scheduler), not by an error; nothing more was saved. Running snakemake again (with --rerun-incomplete if it "
        f"says the outputs are incomplete) {resumes}"
    )


def _train(spec: RunSpec, files: RunFiles, out_dir: Path, device: torch.device) -> dict:
    run, identity, state, path = begin_run(spec, files, out_dir, device)
    with disk_space(out_dir, disk_needed(run, resuming=state is not None)):
        return train_and_record(run, identity, state, path, out_dir)


def begin_run(
    spec: RunSpec, files: RunFiles, out_dir: Path, device: torch.device
) -> tuple[Run, dict, dict | None, Path]:
    """The run prepared (`prepare`), its identity, the checkpoint it resumes from (None: it starts afresh) and that
    checkpoint's path, after removing what a killed save left in out_dir (alone or in a stack alike)."""
    run = prepare(spec, files, device)
    for stale in interrupted_writes(out_dir):
        log.info("removing %s: a temporary file of a save that was interrupted", stale)
        stale.unlink(missing_ok=True)
    path = out_dir / "checkpoint.pt"
    identity = checkpoint.identity_of(spec, files)
    return run, identity, resume(run, path, identity), path


def disk_needed(run: Run, resuming: bool) -> int:
    """About the bytes the run still writes at its peak: a checkpoint beside the last one (from scratch, the first
    one too), and its records (the reported embeddings; metrics and texts are small beside them)."""
    layers = sum(4 * e.size for e in run.embeddings.values())  # float32, as write_embeddings saves them
    return checkpoint.expected_size(run.model) * (1 if resuming else 2) + layers


def train_and_record(run: Run, identity: dict, state: dict | None, path: Path, out_dir: Path) -> dict:
    """Train the epochs after `state` (None: all), checkpointing each, then select, score and write the records."""
    rows, best_model = (state["rows"], state["best_model"]) if state else ([], None)
    for epoch in range(state["epoch"] + 1 if state else 1, run.spec.epochs + 1):
        state, best_model = end_epoch(run, identity, epoch_row(run, epoch), rows, best_model, path)
    return record(run, rows, best_model, state, path, out_dir)


def end_epoch(
    run: Run, identity: dict, row: dict, rows: list[dict], best_model: dict | None, path: Path, rng: dict | None = None
) -> tuple[dict, dict]:
    """Keep the epoch's `row` (and its weights when they are the best so far) and checkpoint the run; `rng`: the
    RNG states to save in place of the process's (a stacked run's own dropout stream: embinit.training.stacked).
    Returns the checkpoint and the best weights."""
    best_model = keep_best(run, row, rows, best_model)
    rows.append(row)
    state = checkpoint.snapshot(identity, row["epoch"], run.model, run.optimizer, run.generator, best_model, rows, rng)
    checkpoint.save_checkpoint(path, state)
    return state, best_model


def record(
    run: Run, rows: list[dict], best_model: dict, state: dict, path: Path, out_dir: Path, stack: int = 1
) -> dict:
    """After the last epoch: select and score the reported state, write the run's records (final.json last) and
    mark its checkpoint finished. `stack`: how many runs trained together with this one in one model when it ended,
    itself included (embinit.training.stacked)."""
    write_metrics(out_dir / "metrics.parquet", rows)
    if run.translation:
        selected = select_and_score_translation(run, rows, best_model, out_dir)
    else:
        selected = select_classification(rows)
    write_embeddings(out_dir / "embeddings.npz", run.model, best_model)
    final = final_record(run, rows, selected, stack)
    write_text_atomic(out_dir / "final.json", json.dumps(final, indent=2) + "\n")
    checkpoint.save_checkpoint(path, {**state, "finished": True})
    log.info("run %s done: %s", run.name, selected)
    return final


@dataclass
class Run:
    """What the steps of one run share: its spec, where it runs, its data, model and optimizer, the batch
    sampler with its generator, and (translation) what it is scored with."""

    spec: RunSpec
    device: torch.device
    bf16: bool
    splits: dict[str, TranslationData | ClassificationData]
    embeddings: dict[str, np.ndarray]
    model: nn.Module
    compiled_loss: Callable[..., torch.Tensor] | None  # the training steps' loss compiled (train.compile), or None
    packed: bool  # the training steps' position-wise layers on the real tokens only (train.packed)
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    sampler: Sampler  # the batches of `train.batching`
    detokenizer: Detokenizer | None
    references: dict[str, References]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def translation(self) -> bool:
        return self.spec.translation


def prepare(spec: RunSpec, files: RunFiles, device: torch.device) -> Run:
    """Seed every RNG, load the run's inputs and build its model (on `device`), optimizer and batch sampler."""
    kind, train_cfg, name = spec.kind, spec.train, spec.name
    checkpoint.seed_everything(spec.seed)
    max_len = spec.model["max_len"]
    splits = {split: load_dataset(kind, path, max_len) for split, path in files.data.items() if path}
    embeddings = {side: np.load(path) for side, path in files.embeddings.items() if path}
    model = build_model(spec, embeddings).to(device)
    compiled, packed = spec.speed("compile"), spec.speed("packed")
    if packed and not spec.translation:
        raise ValueError(f"run {name}: train.packed is for translation runs, this one is {kind}")
    generator = torch.Generator().manual_seed(spec.seed)
    run = Run(
        spec=spec,
        device=device,
        bf16=bool(train_cfg.get("bf16", False)) and device.type == "cuda",
        splits=splits,
        embeddings=embeddings,
        model=model,
        compiled_loss=compile_loss(model) if compiled else None,
        packed=packed,
        optimizer=adam(model, spec.lr, train_cfg),
        generator=generator,
        sampler=batch_sampler(
            train_cfg["batching"], splits["train"].lengths(), spec.batch_size, train_cfg["bucket_width"], generator
        ),
        detokenizer=None,
        references={},
    )
    if run.translation:
        run.detokenizer, run.references = scoring_inputs(spec, files, splits)
    log.info(
        "run %s: %s, %d parameters, device %s, %d threads, %s steps",
        name,
        kind,
        model.num_parameters(),
        device,
        torch.get_num_threads(),
        "compiled" if compiled else "eager",
    )
    return run


def scoring_inputs(spec: RunSpec, files: RunFiles, splits: dict) -> tuple[Detokenizer, dict[str, References]]:
    """A translation run's detokenizer and references, each references file as long as its split."""
    paths, name = files.references, spec.name
    needed = {f"references.{s}": paths.get(s) for s in ("valid", "test") if s == "test" or spec.valid_bleu}
    missing = [role for role, path in {**needed, "detokenizer": files.detokenizer}.items() if not path]
    if missing:
        raise ValueError(f"run {name}: a translation run needs {', '.join(missing)} (the vocab stage's files)")
    references = {split: read_references(path) for split, path in paths.items() if path}
    for split, refs in references.items():
        if len(refs.ref) != len(splits[split]):
            raise ValueError(
                f"run {name}: {paths[split]} holds {len(refs.ref)} references, the {split} split "
                f"{len(splits[split])} sentences"
            )
    return load_detokenizer(files.detokenizer), references


def resume(run: Run, path: Path, identity: dict) -> dict | None:
    """The checkpoint this run continues (its model, optimizer, sampler and RNGs restored), or None."""
    state = checkpoint.resumable_checkpoint(path, identity, run.spec.epochs, run.name)
    if state is not None:
        checkpoint.restore(state, run.model, run.optimizer, run.generator)
        log.info("resuming %s after epoch %d", run.name, state["epoch"])
    return state


def epoch_row(run: Run, epoch: int) -> dict:
    """Train one epoch, then validate: the epoch's metrics row, timings included (also logged)."""
    began = time.perf_counter()
    train_loss, tokens = train_epoch(
        run.model,
        run.optimizer,
        run.splits["train"],
        run.sampler,
        run.device,
        run.bf16,
        run.name,
        epoch,
        run.compiled_loss,
        run.packed,
    )
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    return scored_row(run, epoch, train_loss, tokens, time.perf_counter() - began)


def scored_row(run: Run, epoch: int, train_loss: float, tokens: int, train_seconds: float) -> dict:
    """The metrics row of an epoch whose training pass is done: validation, scores, mechanism metrics, timings."""
    began = time.perf_counter()
    row = {
        "epoch": epoch,
        "train_loss": train_loss,
        "valid_loss": evaluate_loss(run.model, run.splits["valid"], run.spec.batch_size, run.device, run.bf16),
    }
    check_finite(row["valid_loss"], run.name, epoch, "validation loss")
    row.update(epoch_scores(run))
    valid_seconds = time.perf_counter() - began
    timing = {
        "train_seconds": train_seconds,
        "valid_seconds": valid_seconds,
        "tokens_per_second": tokens / train_seconds,
    }
    if mechanism.enabled(run.spec.train):
        probe_began = time.perf_counter()
        row.update(
            mechanism.measure(
                run.model,
                run.splits["valid"],
                run.spec.batch_size,
                run.device,
                mechanism.probe_size(run.spec.train),
            )
        )
        if run.device.type == "cuda":
            torch.cuda.synchronize(run.device)
        timing["mechanism_seconds"] = time.perf_counter() - probe_began
    row.update(timing)
    log.info("%s epoch %d: %s", run.name, epoch, {k: round(v, 4) for k, v in row.items() if k != "epoch"})
    return {k: float(v) if k != "epoch" else v for k, v in row.items()}


def epoch_scores(run: Run) -> dict:
    """The scores beside the validation loss every epoch: greedy validation BLEU (translation, when
    `valid_bleu`), or validation accuracy and, where there is a test split (MNLI mismatched), test accuracy."""
    batch_size = run.spec.batch_size
    if run.translation:
        if not run.spec.valid_bleu:
            return {}
        _, scores = scoring.greedy_bleu(
            run.model,
            run.splits["valid"],
            run.references["valid"],
            run.detokenizer,
            batch_size,
            run.device,
            run.bf16,
            run.spec.train["decode_max_extra"],
        )
        return {"valid_paper_bleu": scores["paper_bleu"], "valid_sacrebleu": scores["sacrebleu"]}
    scores = {"valid_acc": scoring.accuracy(run.model, run.splits["valid"], batch_size, run.device, run.bf16)}
    if "test" in run.splits:
        scores["test_acc"] = scoring.accuracy(run.model, run.splits["test"], batch_size, run.device, run.bf16)
    return scores


def keep_best(run: Run, row: dict, rows: list[dict], best_model: dict | None) -> dict | None:
    """The weights (on the CPU) of the state the run reports, `row` (not yet in `rows`) included, the earliest
    epoch on ties: translation the lowest validation loss so far, classification the best validation accuracy."""
    if best_model is None:
        better = True
    elif run.translation:
        better = row["valid_loss"] < min(r["valid_loss"] for r in rows)
    else:
        better = row["valid_acc"] > max(r["valid_acc"] for r in rows)
    if better:
        return {k: v.detach().cpu().clone() for k, v in run.model.state_dict().items()}
    return best_model


def write_embeddings(path: Path, model: nn.Module, best_model: dict) -> None:
    """embeddings.npz: the input embedding matrix of each side (`encoder`, `decoder`) of the reported state."""
    arrays = {side: best_model[key].float().numpy() for side, key in mechanism.embedding_keys(model).items()}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def write_metrics(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)


def select_and_score_translation(run: Run, rows: list[dict], best_model: dict, out_dir: Path) -> dict:
    """Score the lowest-validation-loss epoch (the earliest on ties) on the test split; write its BLEU texts
    (tok_hyp -> test.tok.hyp.txt, hyp -> test.hyp.txt, ...)."""
    best = min(rows, key=lambda r: r["valid_loss"])
    run.model.load_state_dict(best_model)
    texts, scores = scoring.greedy_bleu(
        run.model,
        run.splits["test"],
        run.references["test"],
        run.detokenizer,
        run.spec.batch_size,
        run.device,
        run.bf16,
        run.spec.train["decode_max_extra"],
    )
    for name, lines in texts._asdict().items():
        write_text_atomic(out_dir / f"test.{name.replace('_', '.')}.txt", "".join(f"{x}\n" for x in lines))
    return {
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


def select_classification(rows: list[dict]) -> dict:
    """The best validation accuracy and its epoch (the earliest on ties); where there is a test split (MNLI
    mismatched) the best test accuracy with its own epoch, as the paper reports it."""
    best = max(rows, key=lambda r: r["valid_acc"])
    selected = {
        "best_epoch": best["epoch"],
        "best_valid_acc": best["valid_acc"],
        "best_valid_loss": min(r["valid_loss"] for r in rows),
    }
    if "test_acc" in best:
        best_test = max(rows, key=lambda r: r["test_acc"])
        selected.update(best_test_acc=best_test["test_acc"], best_test_epoch=best_test["epoch"])
    return selected


def final_record(run: Run, rows: list[dict], selected: dict, stack: int = 1) -> dict:
    """final.json: the run, the selected epoch's scores, the model's size, timings, the run's settings and the
    sha256 of the training code (runs of equal `training_code` ran the same code, whatever the commit); `stack`:
    the runs that trained in one model with it (1: alone), whose shared seconds are its timings."""
    spec, model = run.spec, run.model
    return {
        **spec.run,
        "kind": spec.kind,
        **selected,
        "params": model.num_parameters(),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "train_minutes_per_epoch": float(np.mean([r["train_seconds"] for r in rows])) / 60,
        "valid_minutes_per_epoch": float(np.mean([r["valid_seconds"] for r in rows])) / 60,
        "vocab_sizes": {side: int(e.shape[0]) for side, e in run.embeddings.items()},
        "embedding_dim": int(run.embeddings["encoder"].shape[1]),
        "train_size": len(run.splits["train"]),
        "split_sizes": {split: len(data) for split, data in run.splits.items()},  # rows of each tokenized split
        "epochs": spec.epochs,
        "batch_size": spec.batch_size,
        "lr": spec.lr,
        "device": describe(run.device),
        "stack": stack,
        "pos_encoding": spec.variant["pos_encoding"],
        "embedding_trainable": spec.variant["embedding_trainable"],
        # the recipe's switches: which batches, how the model's own weights start, the stacks' final LayerNorms
        "batching": spec.train["batching"],
        "model_init": spec.model["init"],
        "final_norm": spec.model["final_norm"],
        "training_code": checkpoint.code_digest(),
        "spec_digest": spec.digest,  # what the workflow compares with the spec it plans (embinit.identity.records)
    }
