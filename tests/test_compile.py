"""train.compile (issue 44): compiled training steps give the eager steps' losses and gradients, a compiled run resumes
to the uninterrupted result with the mechanism probe measured beside it, and the key is checked and named in a run's
spec. Each test compiles (seconds to two minutes here); without torch.compile on this platform they skip, saying why."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from embinit.workflow.config import load, violations
from embinit.models import Classifier, ModelConfig, Translator
from embinit.workflow.specs import train_spec
from embinit.training import Placement, checkpoint, loop
from embinit.training.batching import pad
from embinit.training.device import CPU_STEPS, step_policy
from embinit.training.epoch import adam, compile_loss, train_step
from test_config import SCHEMA, _config
from test_step_policy import ADAM, CPU, matrix, sentences, translation_batch
from test_train import MECHANISM, Killed, job_of, make_spec, metric_values, selected, toy, train_run  # noqa: F401 (toy)

STEPS = 3


@pytest.fixture(scope="module")
def compiles():
    """Skips, with torch's reason, where torch.compile cannot compile and run a one-line function."""
    try:
        torch.compile(lambda x: x + 1)(torch.ones(2))
    except Exception as error:  # a Python torch.compile does not support, no C++ compiler for inductor, ...
        pytest.skip(f"torch.compile is unavailable here: {type(error).__name__}: {str(error).splitlines()[0]}")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: no graph or recompile count of another test's model carried over."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tiny(kind):
    """A one-layer model with dropout (the masks must match eager's) and a batch with padding."""
    config = ModelConfig(heads=2, ffn_dim=32, layers=1, dropout=0.1)
    if kind == "translator":
        return Translator(matrix(60, 16, 0), matrix(70, 16, 1), config), translation_batch(1)
    ids = pad(sentences(np.random.default_rng(3), 6, 60))
    return Classifier(matrix(60, 16, 0), 3, config), (ids, torch.tensor([0, 2, 1, 1, 0, 2]))


def steps(model, batch, compiled_loss):
    """STEPS Adam steps from the same seed: each step's loss and gradients."""
    torch.manual_seed(11)
    model.train()
    optimizer, policy = adam(model, 1e-2, ADAM), step_policy(CPU, compiled=True)
    out = []
    for _ in range(STEPS):
        loss, _ = train_step(model, optimizer, batch, CPU, False, policy, compiled_loss)
        out.append((loss, [p.grad.clone() for p in model.parameters()]))
    return out


# compiling the translator takes 80 to 120 s here with an empty inductor cache (20 s with a warm one): slow
@pytest.mark.parametrize("kind", [pytest.param("translator", marks=pytest.mark.slow), "classifier"])
def test_compiled_steps_give_the_eager_losses_and_gradients(compiles, kind):
    """Three Adam steps with dropout on, compiled against eager on the same path (the library loss): the same dropout
    masks (fallback_random), so losses and gradients differ by float rounding only, and the module's state_dict keeps
    its own keys (no `_orig_mod.` prefix: a checkpoint of a compiled run loads into a plain model)."""
    model, batch = tiny(kind)
    twin = copy.deepcopy(model)
    eager, compiled = steps(model, batch, None), steps(twin, batch, compile_loss(twin))
    for step, ((loss, grads), (c_loss, c_grads)) in enumerate(zip(eager, compiled)):
        torch.testing.assert_close(c_loss, loss, rtol=1e-5, atol=0.0, msg=lambda m, s=step: f"step {s}: {m}")
        for (name, _), grad, c_grad in zip(model.named_parameters(), grads, c_grads):
            atol = (
                1e-4 * float(grad.abs().max()) + 1e-7
            )  # of the tensor's scale: a key bias's gradient is 0 up to rounding
            torch.testing.assert_close(c_grad, grad, rtol=1e-4, atol=atol, msg=lambda m, k=name: f"{k}: {m}")
    assert list(twin.state_dict()) == list(model.state_dict())


def test_compiled_steps_take_the_library_loss_on_every_device():
    """The fused loss's count of real tokens is a new shape every step: compiled, it would recompile every step."""
    assert step_policy(CPU) == CPU_STEPS and CPU_STEPS.fused_loss
    assert not step_policy(CPU, compiled=True).fused_loss
    assert not step_policy(torch.device("cuda"), compiled=True).fused_loss


def compiled_run(toy, out_dir):  # noqa: F811
    """A compiled toy translation run of 2 epochs, with deterministic kernels: without them inductor adds the embedding
    gradient's rows with atomic adds from parallel threads, whose order, and so the last bits, vary run to run."""
    spec = make_spec(toy, epochs=2, speed_options={"compile": True})
    try:
        return loop.train_run(*job_of(spec), out_dir, Placement("cpu", deterministic=True))
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.slow  # three compiles of a toy translator: 50 s with an empty inductor cache
def test_a_killed_compiled_run_resumes_to_the_uninterrupted_result(compiles, toy, tmp_path, monkeypatch):  # noqa: F811
    """A compiled run, with the mechanism probe every epoch (eager, on the module the compiled steps train), killed
    after epoch 1: its checkpoint holds the plain module's keys and the rerun resumes it (the same identity) to what
    the whole run gave; its first epoch is the eager run's to float rounding."""
    whole = compiled_run(toy, tmp_path / "whole")
    save = checkpoint.save_checkpoint

    def save_then_die(path, state):
        save(path, state)
        raise Killed

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        compiled_run(toy, tmp_path / "killed")
    monkeypatch.undo()
    state = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert state["identity"]["setup"]["speed_options"] == {"compile": True}
    assert not [k for k in state["model"] if k.startswith("_orig_mod.")] and "output.weight" in state["model"]
    resumed = compiled_run(toy, tmp_path / "killed")
    log = (tmp_path / "killed" / "train.log").read_text()
    assert "compiled steps" in log and "resuming toy_block/Xavier/seed7/base after epoch 1" in log
    metrics = metric_values(tmp_path / "killed")
    pd.testing.assert_frame_equal(metrics, metric_values(tmp_path / "whole"))
    assert selected(resumed) == selected(whole)
    assert metrics[MECHANISM["translation"]].notna().all().all()  # the probe's weights_sink filled every epoch

    train_run(make_spec(toy, epochs=1), tmp_path / "eager")
    eager = metric_values(tmp_path / "eager")
    for column in ("train_loss", "valid_loss", "grad_norm_other"):
        assert metrics[column][0] == pytest.approx(eager[column][0], rel=1e-5), column


def test_the_key_is_a_boolean_of_the_schema(tmp_path):
    path = tmp_path / "overlay.yaml"
    for text, expected in [("true", []), ("false", []), ("yes please", ["'yes please' is not of type 'boolean'"])]:
        path.write_text(f"train: {{compile: {text}}}\n")
        assert [
            v.removeprefix("config key train.compile: ") for v in violations(load(SCHEMA), _config(load(path)))
        ] == (expected)


def test_compile_is_in_a_runs_identity_only_when_on():
    """Off (the default), a run's spec and its digest are what they were before the key existed; on, the spec names it
    under `speed_options`, so its runs are other runs than the eager ones."""
    args = ("multi30k_glove", "Pretrained", 0, "base", False)
    config = _config({})
    del config["train"]["compile"]
    before = train_spec(config, *args)
    off, on = (train_spec(_config({"train": {"compile": flag}}), *args) for flag in (False, True))
    assert off == before and off.digest == before.digest
    assert "compile" not in on.train and on.speed_options == {"compile": True}
    assert on.digest != off.digest
    assert checkpoint.setup_of(on) != checkpoint.setup_of(off)
