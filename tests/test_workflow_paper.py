"""The paper's outputs as Snakemake targets, end to end on tiny data; the SLURM profile's resources."""

import re

import pandas as pd
import pytest
import yaml

from conftest import TINY_REMOTES, REPO, SHARED_DATA, needs_shared, planned_outputs, run_snakemake, write_config

pytestmark = pytest.mark.slow

TARGETS = ["all"]
QUESTIONS = (
    ": plural-nouns\nbike bikes dog dogs\ndog dogs bike bikes\nman woman dog dogs\n: verbs\nread reads ride rides\n"
)


def _tiny_paper_config(path, mirror, **extra):
    return write_config(
        path,
        {
            "mirror": str(mirror),
            "run_blocks": ["sst2_glove6b50d", "multi30k_glove6b50d"],
            "remotes": TINY_REMOTES,
            "model": {"max_len": 64},
            "blocks": {
                "sst2_glove6b50d": {
                    "seeds": 2,
                    "epochs": 1,
                    "batch_size": 8,
                    "initializers": ["Xavier", "Pretrained", "Pretrained_Shuffled", "Xavier_Pretrained"],
                },
                "multi30k_glove6b50d": {
                    "seeds": 1,
                    "epochs": 2,
                    "batch_size": 8,
                    "initializers": ["Xavier", "Pretrained", "Pretrained_Xavier"],
                },
            },
            "table3": {
                "block": "multi30k_glove6b50d",
                "initializers": ["Xavier", "Pretrained_Xavier"],
                "variants": ["base", "nopos_frozen"],
                "seeds": 1,
            },
            "table4": {"block": "multi30k_glove6b50d"},
            "table6": {"block": "multi30k_glove6b50d", "side": "decoder"},
            "figure1": {"blocks": ["multi30k_glove6b50d"], "initializers": ["Xavier", "Pretrained"]},
            **extra,
        },
    )


def test_every_paper_output_builds_and_one_initializer_edit_reruns_only_its_part(tmp_path, tiny_mirror):
    (tiny_mirror / "word2vec").mkdir()
    (tiny_mirror / "word2vec" / "questions-words.txt").write_text(QUESTIONS)
    cfg = _tiny_paper_config(tmp_path / "c.yaml", tiny_mirror)
    run_snakemake([*TARGETS, "--cores", "2", "--set-threads", "train=1", "--configfile", str(cfg)], cwd=tmp_path)

    table1 = pd.read_csv(tmp_path / "results/table1.csv")
    assert set(table1["n_seeds"]) <= {1, 2} and (table1["sources"].str.contains("glove6b50d")).all()
    sst = table1[(table1["block"] == "sst2_glove6b50d") & (table1["initializer"] == "Pretrained")]
    assert sst["n_seeds"].tolist() == [2] and sst["p_paired_t"].notna().all()
    assert "Xavier_Pretrained" in set(pd.read_csv(tmp_path / "results/table7.csv")["initializer"])
    table3 = pd.read_csv(tmp_path / "results/table3.csv")
    assert {(r.embedding_trainable, r.pos_encoding) for r in table3.itertuples()} == {(True, True), (False, False)}
    assert len(pd.read_csv(tmp_path / "results/table4.csv")) == 7
    assert len(pd.read_csv(tmp_path / "results/table4_sensitivity.csv")) == 7 * 4
    assert len(pd.read_csv(tmp_path / "results/paper_comparison.csv")) > 0
    assert (tmp_path / "results/figure1.png").stat().st_size > 1000

    run_snakemake(["--report", "results/report.html", "--configfile", str(cfg)], cwd=tmp_path)
    html = (tmp_path / "results/report.html").read_text(errors="replace")
    assert "table1.csv" in html and "figure1.png" in html

    edited = _tiny_paper_config(
        tmp_path / "e.yaml", tiny_mirror, initializer_params={"Pretrained_Shuffled": {"mode": "elements"}}
    )
    plan = run_snakemake([*TARGETS, "-n", "--configfile", str(edited)], cwd=tmp_path)
    runs = {
        f"results/sst2_glove6b50d/Pretrained_Shuffled/seed{s}/{f}"
        for s in (0, 1)
        for f in ("embedding_encoder.npy", "base/final.json", "base/metrics.parquet", "base/embeddings.npz")
    }
    compared = ("table1", "table5", "paper_comparison", "findings")
    tables = {f"results/{name}.{ext}" for name in compared for ext in ("csv", "md")}
    # Table 2 has no _Shuffled rows; paper_comparison and findings read Tables 1 and 5
    assert planned_outputs(plan) == runs | tables

    # A clone holds only the committed run records (.gitignore): the result tables rebuild from them alone.
    clone = tmp_path / "clone"
    records = [
        f
        for f in (tmp_path / "results").rglob("*")
        if f.is_file() and (f.name in ("final.json", "metrics.parquet") or f.name.startswith("test."))
    ]
    assert any(f.name == "test.tok.hyp.txt" for f in records)
    for f in records:
        (clone / f.relative_to(tmp_path)).parent.mkdir(parents=True, exist_ok=True)
        (clone / f.relative_to(tmp_path)).write_bytes(f.read_bytes())
    rebuilt = ["results/table1.csv", "results/table3.csv", "results/table5.csv", "results/figure1.png"]
    allowed = ["table1", "table3", "table5", "figure1"]
    run_snakemake([*rebuilt, "--cores", "1", "--allowed-rules", *allowed, "--configfile", str(cfg)], cwd=clone)
    for name in ("table1", "table3"):
        pd.testing.assert_frame_equal(
            pd.read_csv(clone / f"results/{name}.csv"), pd.read_csv(tmp_path / f"results/{name}.csv")
        )
    assert not list(clone.rglob("*.npy")) and not list(clone.rglob("checkpoint.pt"))  # nothing retrained


def planned_resources(proc) -> list[tuple[str, str]]:
    """(rule, resources line) of every job a dry run lists, grouped jobs included."""
    return re.findall(r"^\s*rule (\w+):\n(?:.*\n)*?\s*resources: (.*)", proc.stdout, flags=re.M)


def test_slurm_site_settings_add_to_the_training_jobs_resources_and_reach_every_job(tmp_path):
    """config `cluster` (README "Clusters and GPUs"): a per-call change keeps train's partition, runtime and memory."""
    site = "cluster={account: myproj, gpu_model: h100}"
    proc = run_snakemake(
        ["results/table1.csv", "-n", "--profile", str(REPO / "profiles/slurm"), "--config", site],
        cwd=tmp_path,
        timeout=300,
    )
    jobs = planned_resources(proc)
    train = [res for rule, res in jobs if rule == "train"]
    other = [res for rule, res in jobs if rule in ("prepare_sst2", "vocab_sst2", "initialize_embedding")]
    assert train and other
    for resources in train:
        assert "slurm_partition=gpu" in resources and "gres=gpu:h100:1" in resources, resources
        assert "mem_mb=16000" in resources and "slurm_account=myproj" in resources, resources
        assert re.search(r"runtime=(\d+)", resources).group(1) != "60", resources  # its own, not the default's
    for resources in other:
        assert "gres=" not in resources and "slurm_partition" not in resources, resources  # the cluster's default
        assert "slurm_account=myproj" in resources, resources


def test_paper_grid_runs_three_initializers_on_glove_blocks(tmp_path):
    """The paper tested three initializations with GloVe: no GloVe_Shuffled or Xavier_GloVe runs."""
    plan = planned_outputs(run_snakemake(["results/table1.csv", "results/table7.csv", "-n"], cwd=tmp_path))
    runs = {tuple(p.split("/")[1:3]) for p in plan if p.endswith("/base/final.json")}
    glove = {init for block, init in runs if block.endswith("_glove")}
    assert glove == {"Xavier", "Pretrained", "Pretrained_Xavier"}
    assert {init for block, init in runs if block.endswith("_mbert")} >= {"Pretrained_Shuffled", "Xavier_Pretrained"}


def test_xavier_runs_need_neither_the_pretrained_download_nor_its_extraction(tmp_path):
    """A user without GloVe 840B can still train a GloVe block's Xavier row: its layer needs only N and D."""
    cfg = write_config(tmp_path / "x.yaml", {"run_blocks": ["sst2_glove"]})
    xavier = planned_outputs(
        run_snakemake(["results/sst2_glove/Xavier/seed0/base/final.json", "-n", "--configfile", str(cfg)], cwd=tmp_path)
    )
    assert "results/sst2_glove/Xavier/seed0/embedding_encoder.npy" in xavier
    assert not [p for p in xavier if "glove.840B" in p or "pretrained_" in p]
    glove = planned_outputs(
        run_snakemake(
            ["results/sst2_glove/Pretrained/seed0/base/final.json", "-n", "--configfile", str(cfg)], cwd=tmp_path
        )
    )
    assert "results/sst2_glove/pretrained_encoder.npy" in glove and any("glove.840B" in p for p in glove)


def test_gpu_profiles_can_pack_training_jobs_on_one_gpu(tmp_path):
    """local-gpu: k = gpu_jobs training jobs share the GPU; slurm: k = cluster.pack runs share one GPU job (rule pack,
    formed when the jobs are submitted: a dry run lists the runs), not a Snakemake group (#469: run one by one)."""
    local = run_snakemake(["results/table1.csv", "-n", "--profile", str(REPO / "profiles/local-gpu")], cwd=tmp_path)
    profile = yaml.safe_load((REPO / "profiles/local-gpu/config.yaml").read_text())
    assert profile["resources"] == {"gpu_jobs": 4}  # no `gpu` limit: k jobs run at once on the one GPU
    train = [res for rule, res in planned_resources(local) if rule == "train"]
    assert train and all("gpu_jobs=1" in res for res in train)
    assert "group-components" not in yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    assert yaml.safe_load((REPO / "config.yaml").read_text())["cluster"]["pack"] == 4
    slurm = run_snakemake(
        ["results/table1.csv", "-n", "--profile", str(REPO / "profiles/slurm")], cwd=tmp_path, timeout=300
    )
    assert "Group job" not in slurm.stdout
    train = [res for rule, res in planned_resources(slurm) if rule == "train"]
    assert train and all("slurm_partition=gpu" in res and "gres=gpu:1" in res for res in train)


@needs_shared
def test_first_run_config_trains_only_sst2_and_builds_its_outputs(tmp_path):
    """README command 1: config/first-run.yaml plans 6 SST-2 runs and none of Multi30k's (`outputs` subset)."""
    plan = planned_outputs(
        run_snakemake(
            ["-n", "--configfile", str(REPO / "config/first-run.yaml"), "--config", f"mirror={SHARED_DATA}"],
            cwd=tmp_path,
        )
    )
    runs = {p for p in plan if p.endswith("/final.json")}
    assert len(runs) == 6 and all(p.startswith("results/first-run/sst2_glove6b50d/") for p in runs)
    tables = ("table1", "table2", "table4", "table6", "paper_comparison", "findings")
    assert {f"results/first-run/{n}.csv" for n in tables} <= plan
    assert not {p for p in plan if "table3" in p or "figure1" in p or "table7" in p}


def test_the_readme_extension_example_puts_its_initializer_in_table1(tmp_path):
    """docs/extending.md: examples/scaled_xavier.yaml on top of the first run adds Xavier_Scaled runs to the SST-2
    block, and they need no pre-trained layer (the extension registers it with reads_pretrained=False)."""
    overlay = yaml.safe_load((REPO / "examples/scaled_xavier.yaml").read_text())
    overlay["extensions"] = [str(REPO / path) for path in overlay["extensions"]]  # this test runs elsewhere
    cfg = tmp_path / "ext.yaml"
    cfg.write_text(yaml.safe_dump(overlay))
    proc = run_snakemake(
        ["results/first-run/table1.csv", "-n", "--configfile", str(REPO / "config/first-run.yaml"), str(cfg)],
        cwd=tmp_path,
    )
    plan = planned_outputs(proc)
    scaled = {p for p in plan if "/Xavier_Scaled/" in p}
    assert {f"results/first-run/sst2_glove6b50d/Xavier_Scaled/seed{s}/base/final.json" for s in range(3)} <= scaled
    layer = "results/first-run/sst2_glove6b50d/Xavier_Scaled/seed0/embedding_encoder.npy"
    lines = proc.stdout.splitlines()
    output = lines.index(f"    output: {layer}")
    assert lines[output - 1] == "    input: data/first-run/vocab/sst2/spacy/encoder.parquet"  # no pre-trained layer
