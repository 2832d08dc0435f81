"""Runs trained as one stack (embinit.training.stacked) train as they do alone: per-step losses, records, early
leavers and a killed stack's resume, on tiny generated data with two initializers, frozen and trainable, P and none."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import TIMING
from embinit.training import Placement, checkpoint, epoch, loop, stacked
from test_train import job_of, make_spec, write_translation

CPU = Placement(device="cpu")
CELLS = [  # (initializer's layer, trainable, position encoding, seed)
    ("a", True, "sinusoidal", 1),
    ("b", False, "sinusoidal", 2),
    ("a", False, "none", 3),
    ("b", True, "none", 4),
]


@pytest.fixture(scope="module")
def toy4(tmp_path_factory):
    """Toy Multi30k-like splits of 256 training pairs (32 steps an epoch) and two initial layers, `a` and `b`."""
    root = tmp_path_factory.mktemp("toy4")
    rng = np.random.default_rng(1)
    for split, n in [("train", 256), ("valid", 16), ("test", 16)]:
        write_translation(root / f"mt_{split}.parquet", rng, n, root / f"refs_{split}.parquet")
    from test_train import DIM, WORDS, SpacyTokenizer, vocab, write_detokenizer

    write_detokenizer(root / "detokenizer.json", vocab("e"), SpacyTokenizer("en"))
    for layer, scale in (("a", 0.3), ("b", 1.0)):
        for side in ("encoder", "decoder"):
            matrix = rng.normal(0, scale, size=(4 + WORDS, DIM)).astype(np.float32)
            np.save(root / f"emb_{layer}_{side}.npy", matrix)
    return root


def cell_spec(toy, layer, trainable, encoding, seed, epochs=8):
    """A toy run of 8 epochs of 32 steps at lr 1e-3 (the paper's is 1e-4; at the toy default 1e-2 rounding grows
    chaotically past ~100 steps, stacked or not: a run and its rerun with one float reordered part by 1e-2)."""
    spec = make_spec(toy, epochs=epochs, seed=seed, lr=1e-3)
    spec["train"] = {**spec["train"], "bf16": False}
    spec["embeddings"] = {side: str(toy / f"emb_{layer}_{side}.npy") for side in ("encoder", "decoder")}
    spec["variant"] = {"pos_encoding": encoding, "embedding_trainable": trainable}
    spec["run"] = {**spec["run"], "initializer": layer, "seed": seed, "variant": f"{encoding}-{trainable}"}
    return spec


def step_losses(monkeypatch, stacked_run: bool) -> list:
    """Record every step's per-run summed loss as a list (alone: one per step; stacked: k per step)."""
    seen = []
    if stacked_run:
        step = stacked.Stack.step

        def recording(self, *args, **kwargs):
            losses, terms = step(self, *args, **kwargs)
            seen.append([float(v) / n for v, n in zip(losses.tolist(), terms)])
            return losses, terms

        monkeypatch.setattr(stacked.Stack, "step", recording)
    else:
        step = epoch.train_step

        def recording(*args, **kwargs):
            loss, n = step(*args, **kwargs)
            seen.append(float(loss) / n)
            return loss, n

        monkeypatch.setattr(epoch, "train_step", recording)
    return seen


def numbers(out_dir):
    return pd.read_parquet(out_dir / "metrics.parquet").drop(columns=TIMING)


@pytest.fixture(scope="module")
def alone(toy4, tmp_path_factory):
    """Each cell trained alone by the ordinary loop, its per-step losses recorded."""
    results = []
    for cell in CELLS:
        out = tmp_path_factory.mktemp("alone")
        with pytest.MonkeyPatch.context() as mp:
            losses = step_losses(mp, stacked_run=False)
            final = loop.train_run(*job_of(cell_spec(toy4, *cell)), out, CPU)
        results.append((out, final, losses))
    return results


@pytest.fixture(scope="module")
def together(toy4, tmp_path_factory):
    outs = [tmp_path_factory.mktemp("stacked") for _ in CELLS]
    with pytest.MonkeyPatch.context() as mp:
        losses = step_losses(mp, stacked_run=True)
        finals = stacked.train_stack([job_of(cell_spec(toy4, *cell)) for cell in CELLS], outs, CPU)
    return outs, finals, losses


def test_four_different_runs_stacked_take_the_steps_they_take_alone(alone, together):
    outs, finals, losses = together
    per_run = np.array(losses).T  # (k, steps)
    assert per_run.shape == (4, 8 * 32)
    for i, (out, final, alone_losses) in enumerate(alone):
        np.testing.assert_allclose(per_run[i], alone_losses, rtol=1e-5, err_msg=f"run {CELLS[i]}")
        pd.testing.assert_frame_equal(numbers(outs[i]), numbers(out), rtol=1e-5)
        assert finals[i]["stack"] == 4 and final["stack"] == 1
        for key in ("best_epoch", "test_paper_bleu", "test_sacrebleu", "trainable_params", "params"):
            assert finals[i][key] == pytest.approx(final[key], rel=1e-5), key
        assert (outs[i] / "test.hyp.txt").read_text() == (out / "test.hyp.txt").read_text()
        written = json.loads((outs[i] / "final.json").read_text())
        assert written["spec_digest"] == final["spec_digest"] and written["stack"] == 4
    # the runs differ from each other by far more than the tolerance: a mixed-up run axis would show
    assert np.abs(per_run[0] - per_run[1]).max() > 1e-2


def test_a_frozen_runs_embedding_stays_its_initial_layer_in_the_stack(together, toy4):
    outs, _, _ = together
    for out, (layer, trainable, _, _) in zip(outs, CELLS):
        trained = np.load(out / "embeddings.npz")
        initial = np.load(toy4 / f"emb_{layer}_decoder.npy")
        assert np.array_equal(trained["decoder"], initial) != trainable


def test_a_run_of_fewer_epochs_leaves_the_stack_where_it_stops_alone(toy4, tmp_path, alone):
    """Cell 0 trains 2 epochs, the others 8: its record equals its alone run of 2 epochs; the rest still equal theirs,
    and each record says the stack it ended in (cell 0: of 3; the others, after it left: of 2)."""
    short_alone = tmp_path / "short_alone"
    loop.train_run(*job_of(cell_spec(toy4, *CELLS[0], epochs=2)), short_alone, CPU)
    specs = [cell_spec(toy4, *CELLS[0], epochs=2)] + [cell_spec(toy4, *cell) for cell in CELLS[1:3]]
    outs = [tmp_path / f"s{i}" for i in range(3)]
    finals = stacked.train_stack(list(map(job_of, specs)), outs, CPU)
    assert [final["stack"] for final in finals] == [3, 2, 2]
    assert [json.loads((out / "final.json").read_text())["stack"] for out in outs] == [3, 2, 2]
    pd.testing.assert_frame_equal(numbers(outs[0]), numbers(short_alone), rtol=1e-5)
    for out, (alone_out, _, _) in zip(outs[1:], alone[1:3]):
        pd.testing.assert_frame_equal(numbers(out), numbers(alone_out), rtol=1e-5)


def test_a_run_whose_loss_turns_nan_leaves_the_stack_and_the_others_train_on(toy4, tmp_path, alone):
    """A run whose decoder layer is NaN fails at the end of its first epoch, as alone; the two runs beside it train
    their epochs as they do alone, are recorded as having ended in a stack of two, and the stack then fails naming
    the run."""
    for side in ("encoder", "decoder"):
        matrix = np.load(toy4 / f"emb_a_{side}.npy")
        np.save(tmp_path / f"emb_nan_{side}.npy", matrix if side == "encoder" else np.full_like(matrix, np.nan))
    broken = cell_spec(toy4, "a", True, "sinusoidal", 9, epochs=2)
    broken["embeddings"] = {side: str(tmp_path / f"emb_nan_{side}.npy") for side in ("encoder", "decoder")}
    broken["run"]["initializer"] = "nan"
    specs = [cell_spec(toy4, *CELLS[0], epochs=2), broken, cell_spec(toy4, *CELLS[1], epochs=2)]
    outs = [tmp_path / f"n{i}" for i in range(3)]
    with pytest.raises(
        FloatingPointError, match="toy_block/nan/seed9/sinusoidal-True: training loss became nan in epoch 1"
    ):
        stacked.train_stack(list(map(job_of, specs)), outs, CPU)
    assert not (outs[1] / "final.json").exists() and not (outs[1] / "checkpoint.pt").exists()
    for out, (alone_out, _, _) in zip((outs[0], outs[2]), alone[:2]):
        pd.testing.assert_frame_equal(numbers(out), numbers(alone_out).iloc[:2], rtol=1e-5)
        written = json.loads((out / "final.json").read_text())
        assert written["epochs"] == 2 and written["stack"] == 2


def test_runs_without_p_stack_alone_and_train_as_they_do_alone(toy4, tmp_path, alone):
    """A stack of only runs without P (nopos_frozen, nopos: no position table among them) trains as each run alone."""
    specs = [cell_spec(toy4, *cell, epochs=2) for cell in CELLS[2:]]
    outs = [tmp_path / f"p{i}" for i in range(2)]
    finals = stacked.train_stack(list(map(job_of, specs)), outs, CPU)
    assert [final["pos_encoding"] for final in finals] == ["none", "none"]
    for out, (alone_out, _, _) in zip(outs, alone[2:]):
        pd.testing.assert_frame_equal(numbers(out), numbers(alone_out).iloc[:2], rtol=1e-5)


class Killed(Exception):
    pass


def test_a_killed_stack_resumes_each_run_stacked_or_alone(toy4, tmp_path, monkeypatch, together):
    """Killed after 2 epochs' checkpoints: runs 0-2 resume as a stack and run 3 alone, each to its uninterrupted
    stacked result."""
    specs = [cell_spec(toy4, *cell) for cell in CELLS]
    outs = [tmp_path / f"r{i}" for i in range(4)]
    save, saved = checkpoint.save_checkpoint, []

    def save_then_die(path, state):
        save(path, state)
        saved.append(path)
        if len(saved) == 8:
            torch.rand(100)  # the dying process's RNG moved on
            raise Killed

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        stacked.train_stack(list(map(job_of, specs)), outs, CPU)
    monkeypatch.undo()
    assert [torch.load(o / "checkpoint.pt", weights_only=True)["epoch"] for o in outs] == [2, 2, 2, 2]
    stacked.train_stack(list(map(job_of, specs[:3])), outs[:3], CPU)
    loop.train_run(*job_of(specs[3]), outs[3], CPU)
    for i, out in enumerate(outs):
        assert f"resuming {job_of(specs[i])[0].name} after epoch 2" in (out / "train.log").read_text()
        pd.testing.assert_frame_equal(numbers(out), numbers(together[0][i]), rtol=1e-5)


def test_runs_a_stack_cannot_hold_are_named_before_any_training(toy4, tmp_path):
    specs = [cell_spec(toy4, *CELLS[0]), cell_spec(toy4, *CELLS[1])]
    specs[1]["lr"] = 5e-3
    specs[0]["variant"]["pos_encoding"] = "rotary"
    with pytest.raises(ValueError) as error:
        stacked.train_stack(list(map(job_of, specs)), [tmp_path / "a", tmp_path / "b"], CPU)
    message = str(error.value)
    assert "pos_encoding 'rotary'" in message and "lr 0.005 differs" in message
    assert not (tmp_path / "a" / "checkpoint.pt").exists()


def test_every_tensor_of_a_stacked_model_is_on_its_runs_device(toy4):
    """A stack of models on the meta device (as on a GPU) holds nothing on the CPU: a tensor made there would stop
    its first step on a GPU."""
    specs = [cell_spec(toy4, *cell) for cell in CELLS[:2]]
    models = [epoch.build_model(job_of(spec)[0], {side: np.load(spec["embeddings"][side]) for side in ("encoder", "decoder")})
              for spec in specs]  # fmt: skip
    state = stacked.StackState([torch.Generator(), torch.Generator()])
    model = stacked.stack_models([m.to("meta") for m in models], state)
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    assert tensors and {name: t.device.type for name, t in tensors.items() if t.device.type != "meta"} == {}
