"""The beyond-the-paper outputs (Tables 9-11, Figure 2) as Snakemake targets, end to end on tiny data, and their
rebuild from the committed run records alone."""

import json

import pandas as pd
import pytest

from conftest import TINY_REMOTES, run_snakemake, write_config

pytestmark = pytest.mark.slow

OUTPUTS = ["table9", "table10", "table11", "figure2"]
TARGETS = [f"results/{name}.csv" for name in OUTPUTS]
QUESTIONS = ": plural-nouns\nbike bikes dog dogs\ndog dogs bike bikes\nman woman dog dogs\n"


def _tiny_beyond_config(path, mirror):
    inits = ["Xavier", "Pretrained"]
    return write_config(
        path,
        {
            "mirror": str(mirror),
            "outputs": OUTPUTS,
            "run_blocks": ["multi30k_glove6b50d"],
            "remotes": TINY_REMOTES,
            "model": {"max_len": 64},
            "train": {"mechanism_probe": 4},
            "blocks": {
                "multi30k_glove6b50d": {"seeds": 2, "epochs": 2, "batch_size": 8, "initializers": inits, "lr": 5.0e-4},
                "sst2_glove6b50d": {"seeds": 1, "epochs": 1, "batch_size": 8, "initializers": inits},
            },
            "table9": {
                "blocks": ["multi30k_glove6b50d", "sst2_glove6b50d"],
                "initializers": inits,
                "variants": ["base", "rotary", "relative"],
            },
            "table10": {"block": "multi30k_glove6b50d", "side": "decoder", "initializers": inits},
            "table11": {"blocks": ["multi30k_glove6b50d"], "initializers": inits, "variants": ["base", "tied"]},
            "figure2": {"blocks": ["multi30k_glove6b50d"], "initializers": inits},
            "table4": {"block": "multi30k_glove6b50d"},
        },
    )


def test_beyond_outputs_build_end_to_end_and_their_tables_rebuild_from_run_records(tmp_path, tiny_mirror):
    (tiny_mirror / "word2vec").mkdir()
    (tiny_mirror / "word2vec" / "questions-words.txt").write_text(QUESTIONS)
    cfg = _tiny_beyond_config(tmp_path / "c.yaml", tiny_mirror)
    run_snakemake(["all", "--cores", "2", "--set-threads", "train=1", "--configfile", str(cfg)], cwd=tmp_path)
    results = tmp_path / "results"

    table9 = pd.read_csv(results / "table9.csv")
    cells = {(r.block, r.initializer, r.pos_encoding) for r in table9.itertuples()}
    assert cells == {
        (b, i, p)
        for b in ("multi30k_glove6b50d", "sst2_glove6b50d")
        for i in ("Xavier", "Pretrained")
        for p in ("sinusoidal", "rotary", "relative")
    }
    # each encoding's Pretrained row is compared with Xavier under that same encoding
    bleu = table9[(table9.metric == "bleu") & (table9.initializer == "Pretrained")]
    assert bleu["n_pairs"].tolist() == [2, 2, 2] and bleu["diff_vs_xavier"].notna().all()

    table11 = pd.read_csv(results / "table11.csv")
    assert {(r.initializer, r.output_embedding) for r in table11.itertuples()} == {
        (i, o) for i in ("Xavier", "Pretrained") for o in ("untied", "tied")
    }
    tied = table11[(table11.metric == "bleu") & (table11.output_embedding == "tied")]
    assert tied["n_pairs"].tolist() == [2, 2] and tied["diff_vs_base"].notna().all()

    table10 = pd.read_csv(results / "table10.csv")
    assert set(table10.initializer) == {"Xavier", "Pretrained"} and set(table10.stage) == {"before", "after"}
    assert (table10.n_seeds == 2).all() and table10.accuracy_mean.between(0, 1).all()

    figure2 = pd.read_csv(results / "figure2.csv")
    assert set(figure2.initializer) == {"Xavier", "Pretrained"} and set(figure2.epoch) == {1, 2}
    assert (results / "figure2.png").stat().st_size > 1000
    # the block's own lr reaches its runs; the other block keeps its task's
    lrs = {b: json.loads((results / f"{b}/Xavier/seed0/base/final.json").read_text())["lr"] for b in table9.block}
    assert lrs == {"multi30k_glove6b50d": 5.0e-4, "sst2_glove6b50d": 1.0e-4}
    rotary = pd.read_parquet(results / "multi30k_glove6b50d/Xavier/seed0/rotary/metrics.parquet")
    assert {"sigma_decoder", "grad_norm_embedding"} <= set(rotary.columns)

    # A clone holds only the committed run records (.gitignore): Tables 9 and 11 and Figure 2 rebuild from them.
    clone = tmp_path / "clone"
    for f in results.rglob("*"):
        if f.is_file() and (f.name in ("final.json", "metrics.parquet") or f.name.startswith("test.")):
            (clone / f.relative_to(tmp_path)).parent.mkdir(parents=True, exist_ok=True)
            (clone / f.relative_to(tmp_path)).write_bytes(f.read_bytes())
    rebuilt = ["results/table9.csv", "results/table11.csv", "results/figure2.png"]
    allowed = ["table9", "table11", "figure2"]
    run_snakemake([*rebuilt, "--cores", "1", "--allowed-rules", *allowed, "--configfile", str(cfg)], cwd=clone)
    for name in ("table9", "table11", "figure2"):
        pd.testing.assert_frame_equal(
            pd.read_csv(clone / f"results/{name}.csv"), pd.read_csv(results / f"{name}.csv"), check_exact=False
        )
    assert not list(clone.rglob("checkpoint.pt"))  # nothing retrained
