"""Embedding stage through Snakemake: editing one initializer reruns only its jobs and the tables after them."""

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_DATA, needs_shared, planned_outputs, run_snakemake, write_config

pytestmark = pytest.mark.slow


def _tiny_config(path, mirror, **extra):
    overrides = {
        "mirror": str(mirror),
        "run_blocks": ["sst2_glove6b50d"],
        "blocks": {"sst2_glove6b50d": {"seeds": 1}},
        # the tiny mirror's SST-2 files are not GLUE's: no checksum for them
        "remotes": {"glue/SST-2/train.tsv": {"sha256": None}, "glue/SST-2/dev.tsv": {"sha256": None}},
        **extra,
    }
    return write_config(path, overrides)


def test_editing_one_initializer_reruns_only_its_jobs_and_tables(tmp_path, tiny_mirror):
    shuffled = "results/sst2_glove6b50d/Pretrained_Shuffled/seed0/embedding_encoder.npy"  # not in Table 2
    targets = ["results/table2.csv", "results/table8.csv", shuffled]
    cfg = _tiny_config(tmp_path / "c.yaml", tiny_mirror)
    run_snakemake([*targets, "--cores", "2", "--configfile", str(cfg)], cwd=tmp_path)
    layer = tmp_path / shuffled
    pretrained = np.load(tmp_path / "results/sst2_glove6b50d/Pretrained/seed0/embedding_encoder.npy")
    assert not np.array_equal(np.load(layer), pretrained)

    nothing = run_snakemake([*targets, "-n", "--configfile", str(cfg)], cwd=tmp_path)
    assert planned_outputs(nothing) == set()

    edited = _tiny_config(
        tmp_path / "e.yaml", tiny_mirror, initializer_params={"Pretrained_Shuffled": {"mode": "elements"}}
    )
    plan = run_snakemake([*targets, "-n", "--configfile", str(edited)], cwd=tmp_path)
    assert planned_outputs(plan) == {shuffled}


@needs_shared
def test_real_table2_layers_hold_the_invariants(tmp_path):
    blocks = ["sst2_glove6b50d", "sst2_minilm", "multi30k_glove6b50d"]
    cfg = write_config(
        tmp_path / "c.yaml",
        {
            "mirror": str(SHARED_DATA),
            "run_blocks": blocks,
            "table6": {"block": "multi30k_glove6b50d", "side": "decoder"},
            "blocks": {b: {"seeds": 1} for b in blocks},
        },
    )
    shuffled = [
        f"results/{b}/Pretrained_Shuffled/seed0/embedding_{s}.npy"
        for b, s in (("sst2_glove6b50d", "encoder"), ("sst2_minilm", "encoder"), ("multi30k_glove6b50d", "decoder"))
    ]
    run_snakemake(
        [
            "results/table2.csv",
            "results/table8.csv",
            "results/table6.csv",
            *shuffled,
            "--cores",
            "2",
            "--configfile",
            str(cfg),
        ],
        cwd=tmp_path,
    )
    for block, side in (("sst2_glove6b50d", "encoder"), ("sst2_minilm", "encoder"), ("multi30k_glove6b50d", "decoder")):
        layer = {
            init: np.load(tmp_path / f"results/{block}/{init}/seed0/embedding_{side}.npy").astype(np.float64)
            for init in ("Xavier", "Pretrained", "Pretrained_Xavier", "Xavier_Pretrained", "Pretrained_Shuffled")
        }
        n, d = layer["Xavier"].shape
        bound = np.sqrt(6 / (n + d))
        assert np.abs(layer["Xavier"]).max() <= bound
        sigma_x = layer["Xavier"].std(ddof=1)
        p, px = layer["Pretrained"].ravel(), layer["Pretrained_Xavier"].ravel()
        assert abs(px.mean()) < 1e-6 and abs(px.std(ddof=1) - sigma_x) / sigma_x < 2e-2  # another Xavier draw
        slope, intercept = np.polyfit(p, px, 1)
        assert np.allclose(px, slope * p + intercept, atol=1e-6) and np.corrcoef(p, px)[0, 1] > 1 - 1e-9
        xp = layer["Xavier_Pretrained"]
        assert np.isclose(xp.mean(), p.mean(), atol=1e-6) and np.isclose(xp.std(ddof=1), p.std(ddof=1), rtol=1e-5)
        assert np.array_equal(np.sort(layer["Pretrained_Shuffled"].ravel()), np.sort(p))
    table2 = pd.read_csv(tmp_path / "results/table2.csv")
    assert set(table2["source"]) == {"glove6b50d", "minilm"}
    assert (tmp_path / "results/table6.md").read_text().count("|") > 20
