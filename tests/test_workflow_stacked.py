"""cluster.stack through Snakemake on the local executor: a target's runs train in packs of one block, each pack one
process holding its runs as one stacked model (rule pack, embinit.training.stacked), and the next Snakemake finds
every run up to date."""

import json

import pytest

from conftest import TINY_REMOTES, run_snakemake, write_config

pytestmark = pytest.mark.slow


def test_stacked_packs_train_a_tables_runs_and_leave_nothing_to_rerun(tmp_path, tiny_mirror):
    inits, variants = ["Xavier", "Pretrained"], ["nopos_frozen", "base"]
    cfg = write_config(
        tmp_path / "c.yaml",
        {
            "mirror": str(tiny_mirror),
            "outputs": ["table3"],
            "run_blocks": ["multi30k_glove6b50d"],
            "remotes": TINY_REMOTES,
            "model": {"max_len": 64},
            "train": {"mechanism_probe": 4, "device": "cpu"},
            "blocks": {"multi30k_glove6b50d": {"seeds": 2, "epochs": 2, "batch_size": 2, "initializers": inits}},
            "table3": {"block": "multi30k_glove6b50d", "initializers": inits, "variants": variants},
        },
    )
    stacked = ["--config", "cluster={pack: 4, stack: true}"]  # as documented: Snakemake hands the values over as text
    proc = run_snakemake(["results/table3.csv", "--cores", "2", "--configfile", str(cfg), *stacked], cwd=tmp_path)
    block = tmp_path / "results/multi30k_glove6b50d"
    records = [json.loads(p.read_text()) for p in sorted(block.glob("*/seed*/*/final.json"))]
    assert len(records) == 8, proc.stderr[-3000:]
    # two packs of four, each run's record saying it trained in a stack of four, frozen and trainable, P and none
    assert {r["stack"] for r in records} == {4}
    assert {(r["embedding_trainable"], r["pos_encoding"]) for r in records} == {(False, "none"), (True, "sinusoidal")}
    packs = sorted((tmp_path / "results/.packs").rglob("pack*.json"))
    packs = [json.loads(p.read_text()) for p in packs if not p.name.endswith(".runs.json")]
    assert sorted(len(p["runs"]) for p in packs) == [4, 4]
    logs = [p.read_text() for p in (tmp_path / "results/.packs").rglob("pack*.log")]
    assert len(logs) == 2 and all("4 runs trained here as stacks" in log for log in logs), logs
    assert "rule train:" not in proc.stderr  # no run trained as its own job
    again = run_snakemake(["results/table3.csv", "-n", "--configfile", str(cfg), *stacked], cwd=tmp_path)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]
    # runs no output shows yet (seed 5 of a 2-seed block), named by their final.json, are packed too
    asked = [f"results/multi30k_glove6b50d/{init}/seed5/base/final.json" for init in inits]
    dry = run_snakemake([*asked, "-n", "--configfile", str(cfg), *stacked], cwd=tmp_path)
    assert "checkpoint pack:" in dry.stdout and "runtime=60, mem_mb=32000" in dry.stdout, dry.stdout[-3000:]
