"""Runs of one block trained together as one stacked model (`train_stack`): each weight gains a leading run axis,
so one step's kernels serve k runs where k processes would each launch their own (docs/performance.md, "Many runs
in one step").

Each run keeps what makes it itself: its initial weights (built by embinit.training.loop.prepare, as alone), its
batch order (its own sampler), its dropout stream, frozen or trainable embeddings, P or none, its validation,
scoring, checkpoint and record. Which runs share a stack changes none of it:
- the runs' batches are padded to the stack's longest and stacked along the batch axis; padding is masked as alone,
  and a run's extra pad positions reach none of its real outputs;
- every dropout mask is drawn from the run's own generator for the run's own (unpadded) shape, in the order the
  layers draw them alone. That generator starts from the process's RNG state the run would train on alone (after
  its model is built), so on the CPU a stacked run draws the masks it draws alone;
- the objective is the sum of the runs' mean losses, so each run's weights get its own gradient, and Adam is
  elementwise: one optimizer over the stacked weights steps each run as its own would (a frozen run's embedding
  slice gets a zero gradient and so no update).
A stacked run therefore is the run it is alone up to floating-point rounding (tests/test_stacked.py); its record says
the size of the stack it ended in (`stack`), and its checkpoint is a plain run's, so a killed stack resumes each run,
stacked or alone.
Stacked together: translation runs of one vocabulary and D with equal model, training settings, lr, batch size and
whose position encodings are `sinusoidal` or `none` (`stack_problems` says what differs). A run of fewer epochs
records itself after its last and leaves; the others train on as a stack of the rest. Each step of a stack is
`Stack.step`; its epoch loop is a lone run's (embinit.training.epoch.train_pass).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from embinit.data.vocab import BOS, PAD
from embinit.io import disk_space
from embinit.models.layers import Dropout
from embinit.models.loss import linear_cross_entropy
from embinit.models.position import PositionEncoding
from embinit.training import checkpoint
from embinit.training.device import autocast, place, step_policy
from embinit.training.epoch import adam, check_finite, train_pass
from embinit.training.loop import (
    RUN_LOG,
    Run,
    begin_run,
    disk_needed,
    end_epoch,
    record,
    scored_row,
    terminated,
    train_run,
)
from embinit.training.placement import Placement
from embinit.training.spec import RunFiles, RunSpec
from embinit.training.stopping import Terminated, terminated_on_sigterm

log = logging.getLogger(__name__)

Member = tuple[RunSpec, RunFiles]  # a run of a stack: what it is and where its inputs lie

STACKABLE_ENCODINGS = ("sinusoidal", "none")  # additive or nothing: one table per run, zeros for `none`
# spec keys every run of a stack shares (the run's own: run, seed, variant, data and embedding files)
SHARED_KEYS = ("kind", "model", "train", "batch_size", "lr", "valid_bleu", "speed_options")


def stack_problems(specs: list[RunSpec]) -> list[str]:
    """Why these runs cannot train as one stack: each setting that differs from the first run's, or that a stack
    does not take; empty when they can."""
    first, problems = specs[0], []
    for spec in specs:
        name = spec.name
        if not spec.translation:
            problems.append(f"run {name}: a {spec.kind} run (stacks train translation runs)")
        if spec.variant["pos_encoding"] not in STACKABLE_ENCODINGS:
            problems.append(
                f"run {name}: pos_encoding {spec.variant['pos_encoding']!r} (stacks take {STACKABLE_ENCODINGS})"
            )
        if spec.variant.get("output_embedding", "untied") == "tied":
            problems.append(f"run {name}: output_embedding 'tied' (its projection is its frozen or trained input)")
        if spec.speed("compile"):
            problems.append(f"run {name}: train.compile (a stack's steps run eagerly)")
        if spec.speed("packed"):
            problems.append(f"run {name}: train.packed (a stack pads its runs' batches to one)")
        problems += [
            f"run {name}: {key} {getattr(spec, key)!r} differs from run {first.name}'s {getattr(first, key)!r}"
            for key in SHARED_KEYS
            if getattr(spec, key) != getattr(first, key)
        ]
    return problems


def stack_groups(specs: list[RunSpec]) -> list[list[int]]:
    """The indices of `specs` partitioned into stacks: runs of one block whose shared settings agree; a run no stack
    takes (`stack_problems`) is a group of its own."""
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        alone = bool(stack_problems([spec]))
        key = json.dumps([spec.run["block"], *(getattr(spec, k) for k in SHARED_KEYS)], sort_keys=True, default=str)
        groups.setdefault(f"alone {i}" if alone else key, []).append(i)
    return list(groups.values())


def train_stacks(members: list[Member], out_dirs: list, placement: Placement = Placement()) -> list[str]:
    """Train the runs `members` (each its spec and files) into `out_dirs` in one process: each `stack_groups` group
    as a stack (a group of one, alone: embinit.training.loop.train_run), one group after another. A group that fails
    does not stop the others; returns what failed, one line each (empty: all trained). SIGTERM stops them all."""
    failed = []
    for group in stack_groups([spec for spec, _ in members]):
        names = ", ".join(members[i][0].name for i in group)
        try:
            if len(group) == 1:
                train_run(*members[group[0]], out_dirs[group[0]], placement)
            else:
                train_stack([members[i] for i in group], [out_dirs[i] for i in group], placement)
        except Terminated:
            raise
        except Exception as error:  # its log and stderr have the traceback: the next group trains
            failed.append(f"{names}: {type(error).__name__}: {error}")
    return failed


class StackState:
    """What a stack's modules share during one step: each run's dropout generator, and the real sizes of each run's
    batch (rows; source and decoder-input lengths) inside the padded stacked batch of `rows` rows per run."""

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators
        self.rows = 0
        self.sizes: list[dict[str, int]] = []


class StackedLinear(nn.Module):
    """k runs' nn.Linear(D_in, D_out): weight (k, D_out, D_in), bias (k, D_out), on input (k * B, ..., D_in)."""

    def __init__(self, parts: list[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([m.weight.detach() for m in parts]))
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in parts]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.weight.size(0)
        y = torch.baddbmm(self.bias[:, None], x.reshape(k, -1, x.size(-1)), self.weight.transpose(1, 2))
        return y.view(*x.shape[:-1], -1)


class StackedLayerNorm(nn.Module):
    """k runs' nn.LayerNorm(D): normalized as one, each run's gain and bias (k, D) applied to its rows."""

    def __init__(self, parts: list[nn.LayerNorm]):
        super().__init__()
        self.normalized_shape, self.eps = parts[0].normalized_shape, parts[0].eps
        self.weight = nn.Parameter(torch.stack([m.weight.detach() for m in parts]))
        self.bias = nn.Parameter(torch.stack([m.bias.detach() for m in parts]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.weight.size(0)
        y = F.layer_norm(x, self.normalized_shape, eps=self.eps).view(k, -1, x.size(-1))
        return torch.addcmul(self.bias[:, None], y, self.weight[:, None]).view(x.shape)


class StackedEmbedding(nn.Module):
    """k runs' token embeddings (k, N, D), each run's ids looking up its own; `trains` (k,): whose rows learn."""

    def __init__(self, parts: list[nn.Embedding]):
        super().__init__()
        trains = [m.weight.requires_grad for m in parts]
        self.weight = nn.Parameter(torch.stack([m.weight.detach() for m in parts]), requires_grad=any(trains))
        self.register_buffer("trains", torch.tensor(trains, device=self.weight.device), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        k, n = self.weight.shape[:2]
        offsets = torch.arange(0, k * n, n, device=ids.device)[:, None, None]
        return F.embedding((ids.view(k, -1, ids.size(-1)) + offsets).view(ids.shape), self.weight.view(k * n, -1))

    def hold_frozen(self) -> None:
        """Zero the gradient of the runs whose embedding is frozen: Adam then leaves their slice as it was."""
        if self.weight.grad is not None:
            self.weight.grad.masked_fill_(~self.trains[:, None, None], 0.0)


class StackedPosition(PositionEncoding):
    """k runs' additive position tables (k, max_len, D): sinusoidal, or zeros for a run without P (at least one
    run has P: `stack_models`)."""

    def __init__(self, parts: list[PositionEncoding]):
        super().__init__(0, None)
        full = next(p.table for p in parts if hasattr(p, "table"))
        tables = [p.table if hasattr(p, "table") else torch.zeros_like(full) for p in parts]
        self.register_buffer("table", torch.stack(tables), persistent=False)

    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        k, length = self.table.size(0), x.size(1)
        return (x.view(k, -1, *x.shape[1:]) + self.table[:, None, start : start + length]).view(x.shape)


class StackedDropout(Dropout):
    """Each run's dropout mask from its own generator, drawn for its real batch (the draws `Dropout` makes alone on
    the CPU; on a GPU a uniform draw per element), padded to the stacked batch. `lengths`: the dimensions that
    are sequence lengths, and of which side (`src`, or `tgt`: the decoder's input)."""

    def __init__(self, p: float, lengths: dict[int, str], state: StackState):
        super().__init__(p)
        self.lengths = lengths
        self.state = state

    def masks_weights_on(self, device: torch.device) -> bool:
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        state = self.state
        mask = x.new_ones(x.shape)
        for i, (generator, sizes) in enumerate(zip(state.generators, state.sizes)):
            real = list(x.shape)
            real[0] = sizes["rows"]
            for dim, side in self.lengths.items():
                real[dim] = sizes[side]
            n = math.prod(real)
            if x.device.type == "cpu":
                draws = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, generator=generator)
                keep = draws.view(torch.int16)[:n].view(real) >= self.threshold
            else:
                keep = torch.rand(real, generator=generator, device=x.device) >= self.p
            start = i * state.rows
            mask[(slice(start, start + real[0]), *(slice(0, r) for r in real[1:]))] = keep
        return x * mask.mul_(1.0 / (1.0 - self.p))


def dropout_lengths(name: str) -> dict[int, str]:
    """Which dimensions of what the Dropout at module path `name` of a Translator drops are lengths of which side:
    token states (B, T, W) at 1, attention weights (B, heads, T, S) at 2 (queries) and 3 (keys)."""
    side = "src" if name.startswith("encoder.") else "tgt"
    if name.endswith("attention.dropout"):
        return {2: side, 3: "src" if "cross_attention" in name else side}
    return {1: side}


def stack_models(models: list[nn.Module], state: StackState) -> nn.Module:
    """One model holding `models` (Translators of one shape) along a leading run axis of every weight."""
    stacked = copy.deepcopy(models[0])
    for name, module in list(stacked.named_modules()):
        parts = [m.get_submodule(name) for m in models]
        if isinstance(module, nn.Linear):
            replacement = StackedLinear(parts)
        elif isinstance(module, nn.LayerNorm):
            replacement = StackedLayerNorm(parts)
        elif isinstance(module, nn.Embedding):
            replacement = StackedEmbedding(parts)
        elif isinstance(module, PositionEncoding) and any(hasattr(p, "table") for p in parts):  # none: adds nothing
            replacement = StackedPosition(parts)
        elif isinstance(module, Dropout):
            replacement = StackedDropout(module.p, dropout_lengths(name), state)
        else:
            continue
        parent, _, child = name.rpartition(".")
        setattr(stacked.get_submodule(parent), child, replacement)
    return stacked


def dropout_generator(device: torch.device) -> torch.Generator:
    """A generator at the process's RNG state for `device` now: the stream a run's dropout draws from alone."""
    generator = torch.Generator(device=device)
    generator.set_state(torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state())
    return generator


def run_rng(generator: torch.Generator, device: torch.device) -> dict:
    """A stacked run's checkpoint RNG states: the process's, with the run's dropout stream where its device's is."""
    rng = checkpoint.rng_state(device)
    if device.type == "cuda":
        rng["cuda"][device.index if device.index is not None else torch.cuda.current_device()] = generator.get_state()
    else:
        rng["torch"] = generator.get_state()
    return rng


class Stack:
    """k runs (each prepared and resumed as alone) and the one model and Adam that train them."""

    def __init__(self, runs: list[Run], generators: list[torch.Generator]):
        self.runs = runs
        self.state = StackState(generators)
        self.model = stack_models([run.model for run in runs], self.state)
        self.names = {id(p): name for name, p in self.model.named_parameters()}
        self.optimizer = adam(self.model, runs[0].spec.lr, runs[0].spec.train)
        self.embeddings = [m for m in self.model.modules() if isinstance(m, StackedEmbedding)]
        self.load_optimizers()

    def load_optimizers(self) -> None:
        """Adam's state of every run (a resumed run's), stacked; a run without state for a weight (frozen) adds zeros."""
        per_run = [_adam_state_by_name(run) for run in self.runs]
        steps = {float(states[name]["step"]) for states in per_run for name in states}
        if len(steps) > 1:
            raise ValueError(f"the runs of a stack resume at different Adam steps {sorted(steps)}")
        for p in self.optimizer.param_groups[0]["params"]:
            name = self.names[id(p)]
            held = [states.get(name) for states in per_run]
            if not any(held):
                continue
            step = next(h for h in held if h)["step"]
            self.optimizer.state[p] = {
                "step": step.clone().to(p.device),
                **{
                    key: torch.stack([h[key] if h else torch.zeros_like(p[0]) for h in held]).to(p.device)
                    for key in ("exp_avg", "exp_avg_sq")
                },
            }

    def unstack(self) -> None:
        """Each run's model and Adam as the stack has trained them, for its validation, checkpoint and record."""
        stacked = self.model.state_dict()
        for i, run in enumerate(self.runs):
            own = run.model.state_dict()
            run.model.load_state_dict({name: stacked[name][i] for name in own})
            params = {self.names[id(p)]: p for p in self.optimizer.param_groups[0]["params"]}
            names = [name for name, p in run.model.named_parameters() if p.requires_grad]
            state = {}
            for index, name in enumerate(names):
                held = self.optimizer.state.get(params[name])
                if held:
                    state[index] = {
                        "step": held["step"].clone(),
                        "exp_avg": held["exp_avg"][i].clone(),
                        "exp_avg_sq": held["exp_avg_sq"][i].clone(),
                    }
            run.optimizer.load_state_dict({"state": state, "param_groups": run.optimizer.state_dict()["param_groups"]})

    def batch(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The runs' host batches as one: each run's rows padded to the longest source and target and to the most
        rows (a missing row: <bos> alone on each side, which adds no loss term), one run after another."""
        rows = max(len(src) for src, _ in batches)
        length = {"src": max(src.size(1) for src, _ in batches), "tgt": max(tgt.size(1) for _, tgt in batches)}
        src = torch.full((len(batches) * rows, length["src"]), PAD, dtype=torch.long)
        tgt = torch.full((len(batches) * rows, length["tgt"]), PAD, dtype=torch.long)
        self.state.rows, self.state.sizes = rows, []
        for i, (s, t) in enumerate(batches):
            start = i * rows
            src[start : start + len(s), : s.size(1)] = s
            tgt[start : start + len(t), : t.size(1)] = t
            src[start + len(s) : start + rows, 0] = BOS
            tgt[start + len(t) : start + rows, 0] = BOS
            self.state.sizes.append({"rows": len(s), "src": s.size(1), "tgt": t.size(1) - 1})
        return src, tgt

    def losses(self, src: torch.Tensor, tgt: torch.Tensor, fused: bool) -> torch.Tensor:
        """(k,) each run's summed teacher-forced cross-entropy over its real tokens (Translator.loss, per run)."""
        model, k, rows = self.model, len(self.runs), self.state.rows
        memory, keep = model.encode(src)
        states, gold = model.decode(tgt[:, :-1], memory, keep), tgt[:, 1:]
        out = model.output
        if fused:  # each run's real tokens through the chunked fused loss, as alone on the CPU
            losses = []
            for i in range(k):
                own = slice(i * rows, (i + 1) * rows)
                real = (gold[own] != PAD).flatten().nonzero()[:, 0]
                losses.append(
                    linear_cross_entropy(
                        states[own].flatten(0, 1)[real], out.weight[i], out.bias[i], gold[own].flatten()[real]
                    )
                )
            return torch.stack(losses)
        with torch.autocast(states.device.type, enabled=False):
            logits = out(states.float())
            terms = F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=PAD, reduction="none")
        return terms.view(k, -1).sum(1)

    def step(self, batches, device: torch.device, bf16: bool, policy) -> tuple[torch.Tensor, list[int]]:
        """One Adam step of every run on its own batch: the runs' summed losses (k,), left on the device, and their
        numbers of terms."""
        terms = [run.model.loss_terms(t) for run, (_, t) in zip(self.runs, batches)]
        # the terms go with the batch: a tensor made on the device from host numbers would wait for it
        src, tgt, counts = policy.to_device((*self.batch(batches), torch.tensor(terms, dtype=torch.float32)), device)
        with autocast(device, bf16):
            losses = self.losses(src, tgt, policy.fused_loss)
        self.optimizer.zero_grad(set_to_none=True)
        (losses.float() / counts).sum().backward()
        for embedding in self.embeddings:
            embedding.hold_frozen()
        self.optimizer.step()
        return losses.detach(), terms

    def train_epoch(self, epoch: int, device: torch.device, bf16: bool) -> list[tuple[float, int]]:
        """One pass of every run over its own batches, in step: (mean loss per term, real tokens) of each run. A run
        whose loss is not finite leaves after it (`train_group`)."""
        self.model.train()
        step = functools.partial(self.step, device=device, bf16=bf16, policy=step_policy(device))
        datas, orders = [run.splits["train"] for run in self.runs], [run.sampler for run in self.runs]
        return train_pass(step, datas, orders, device, f"stack of {len(self.runs)}", epoch)


def _adam_state_by_name(run: Run) -> dict[str, dict]:
    """A run's Adam state by parameter name (empty before its first step)."""
    names = [name for name, p in run.model.named_parameters() if p.requires_grad]
    return {names[index]: held for index, held in run.optimizer.state_dict()["state"].items()}


def train_stack(members: list[Member], out_dirs: list, placement: Placement = Placement()) -> list[dict]:
    """Train the runs `members` (embinit.training.loop.train_run's spec and files) into `out_dirs` as one stack;
    returns each run's final.json. Runs that resume from different epochs train as one stack per epoch they resume
    from."""
    specs = [spec for spec, _ in members]
    problems = stack_problems(specs)
    if problems:
        raise ValueError("these runs cannot train as one stack:\n  " + "\n  ".join(problems))
    out_dirs = [Path(d) for d in out_dirs]
    handlers = []
    for out_dir in out_dirs:
        out_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(out_dir / "train.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        handlers.append(handler)
    shown = logging.StreamHandler(sys.stderr)
    shown.setLevel(logging.WARNING)
    shown.addFilter(lambda record: not record.exc_info)
    shown.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    for handler in (*handlers, shown):
        RUN_LOG.addHandler(handler)
    RUN_LOG.setLevel(logging.INFO)
    try:
        with terminated_on_sigterm(), place(placement) as device:
            return _train_stack(members, out_dirs, device)
    except Terminated as stop:
        for spec, out_dir in zip(specs, out_dirs):
            log.error("%s", terminated(spec, out_dir, stop))
        raise
    except Exception:
        log.exception("stack of %s failed", ", ".join(spec.name for spec in specs))
        raise
    finally:
        for handler in (*handlers, shown):
            RUN_LOG.removeHandler(handler)
            handler.close()


def _train_stack(given: list[Member], out_dirs: list[Path], device: torch.device) -> list[dict]:
    members = []  # (run, identity, checkpoint state, dropout generator, checkpoint path, out_dir)
    for (spec, files), out_dir in zip(given, out_dirs):
        run, identity, state, path = begin_run(spec, files, out_dir, device)
        members.append((run, identity, state, dropout_generator(device), path, out_dir))
    finals, failed = {}, []
    with contextlib.ExitStack() as space:
        for run, _, state, _, _, out_dir in members:
            space.enter_context(disk_space(out_dir, disk_needed(run, resuming=state is not None)))
        for start in sorted({m[2]["epoch"] if m[2] else 0 for m in members}):
            group = [m for m in members if (m[2]["epoch"] if m[2] else 0) == start]
            failed += train_group(group, start, device, finals)
    if failed:  # the others are recorded
        raise FloatingPointError("; ".join(failed))
    return [finals[id(m)] for m in members]


def train_group(members: list[tuple], start: int, device: torch.device, finals: dict) -> list[str]:
    """Train runs that resume after epoch `start` (0: fresh) as one stack, each to its own last epoch, and record
    them into `finals` (by id of the member); a finished run leaves, and so does one whose loss is no longer finite
    (its checkpoint is its last finite epoch's, as alone), and the rest go on as a new stack of their current state.
    Returns why runs failed. A run's record says the stack it ended in."""
    kept = {id(m): (m[2]["rows"], m[2]["best_model"], m[2]) if m[2] else ([], None, None) for m in members}
    training, failed, epoch = list(members), [], start
    while training:
        runs = [m[0] for m in training]
        stack = Stack(runs, [m[3] for m in training])
        log.info("stack of %d runs from epoch %d: %s", len(runs), epoch + 1, ", ".join(r.name for r in runs))
        last, left = min(run.spec.epochs for run in runs), False
        while epoch < last and not left:
            epoch += 1
            began = time.perf_counter()
            results = stack.train_epoch(epoch, device, runs[0].bf16)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds = time.perf_counter() - began
            stack.unstack()
            for member, (train_loss, tokens) in zip(list(training), results):
                run, identity, _, generator, path, _ = member
                rows, best_model, _ = kept[id(member)]
                try:
                    check_finite(train_loss, run.name, epoch, "training loss")
                    row = scored_row(run, epoch, train_loss, tokens, seconds)
                except FloatingPointError as error:
                    log.error("%s; the rest of its stack trains on", error)
                    failed.append(str(error))
                    training.remove(member)
                    left = True
                    continue
                state, best_model = end_epoch(run, identity, row, rows, best_model, path, run_rng(generator, device))
                kept[id(member)] = (rows, best_model, state)
        for member in [m for m in training if m[0].spec.epochs == epoch]:
            run, _, _, _, path, out_dir = member
            finals[id(member)] = record(run, *kept[id(member)], path, out_dir, stack=len(runs))
            training.remove(member)
    return failed
