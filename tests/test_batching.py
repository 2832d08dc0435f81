"""The batchings registry (embinit.registry.BATCHINGS): the built-ins give the batches they gave before it, bit
for bit; a run trains on a batching of an extension file, whose code is in its checkpoint's identity; one that breaks
its contract stops the dry run naming its file."""

import hashlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import REPO
from embinit.workflow.config import ConfigError
from conftest import isolated
from embinit.workflow.extensions import load
from embinit.training.batching import batch_sampler
from embinit.workflow.trials import try_entries
from test_config import _config
from test_extensions import EVERY_REGISTRY, write
from test_train import make_spec, toy, train_run  # noqa: F401 (toy: the tiny data set, a fixture)

# sha256 of the batches below as `batch_sampler` drew them before the registry (an if-chain over the two names): every
# committed record trained on them
BEFORE_THE_REGISTRY = {
    "random": "50b81df5933948e5257bfc0eb75ed65cc16d7785ef38b2283184bbb16b8f5e37",
    "bucketed": "9d34a0707cbe75ea11069da53447f48a40d68ed34b6ab0e99e2c7cb854fce5cc",
}


@pytest.mark.parametrize("batching", BEFORE_THE_REGISTRY)
def test_a_built_in_batching_gives_the_batches_it_gave_before_the_registry(batching):
    digest = hashlib.sha256()
    for seed in (0, 1, 7):
        rng = np.random.default_rng(seed)
        for lengths in (rng.integers(3, 40, size=(203, 2)), rng.integers(3, 60, size=(97, 1))):
            sampler = batch_sampler(batching, lengths, 16, 4, torch.Generator().manual_seed(seed))  # as loop.prepare
            for _ in range(3):  # three epochs, each drawing on from the generator
                for batch in sampler:
                    digest.update(np.asarray(batch, dtype=np.int64).tobytes() + b"|")
                digest.update(b"#")
            digest.update(str(len(sampler)).encode())
    assert digest.hexdigest() == BEFORE_THE_REGISTRY[batching]


SHORT = """
from embinit.training.batching import register_batching


@register_batching("short_ext")
class Short:
    def __init__(self, lengths, batch_size, bucket_width, generator):
        self.n = len(lengths)

    def __len__(self):
        return 2

    def __iter__(self):
        yield list(range(self.n))  # one batch, where len() says two
"""


def test_a_batching_that_breaks_its_contract_is_named_before_any_job(tmp_path):
    path = write(tmp_path / "short.py", SHORT)
    with isolated():
        load([path])
        with pytest.raises(ConfigError) as error:
            try_entries(_config({"train": {"batching": "short_ext"}}))
    assert re.fullmatch(
        rf"config names a registry entry that fails on a small input: batching 'short_ext' \({re.escape(str(path))}, "
        r"line 4: Short\): batching\(lengths of shape \(9, 2\), 4, 4, generator\) gave 1 batches, len\(\) 2; "
        r"expected len\(\) batches of integer indices in 0\.\.8",
        str(error.value),
    )


def test_a_run_trains_on_an_extension_batching_and_its_checkpoint_knows_its_code(toy, tmp_path):  # noqa: F811
    train = make_spec(toy)["train"] | {"batching": "sorted_ext"}
    spec = make_spec(toy, "classification", epochs=1, train=train, batching_code="one")
    with isolated():
        load([write(tmp_path / "toys.py", EVERY_REGISTRY)])  # as the training job loads the config's `extensions`
        assert train_run(spec, tmp_path / "run")["batching"] == "sorted_ext"
        train_run(spec | {"epochs": 2, "batching_code": "two"}, tmp_path / "run")  # its code edited since
    assert "other setting batching_code; run toy_block/Xavier/seed7/base trains from scratch" in (
        (tmp_path / "run" / "train.log").read_text()
    )


def test_the_built_ins_pass_their_trial_before_their_module_is_imported():
    """At a run's start the registry holds each built-in as its Source (embinit.registry): the trial looks it
    up (a fresh process, so no other test has imported embinit.training.batching)."""
    code = (
        "import sys; from embinit.workflow.trials import try_batching; "
        "assert 'embinit.training.batching' not in sys.modules; "
        "[try_batching(name, 4) for name in ('random', 'bucketed')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
