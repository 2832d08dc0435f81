"""The committed run records (results/<example>/<block>/<init>/seed<k>/<variant>/: final.json,
metrics.parquet and, for translation, the BLEU files) stand behind the committed tables: every table row has
its records, and the paper BLEU recomputes from the token files with sacreBLEU's own command line."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, result_set_config
from embinit.workflow.config import initializers_of, lr_variants, scaled_initializers, seeds_of
from embinit.reports.runs import run_table
from embinit.reports.tables import RATIOS
from embinit.identity.proofs import load_proofs, proof_chain, proof_problems
from embinit.identity.records import code_stale_reason, stale_reason
from embinit.workflow.runsheet import cell_seeds, plotted, recorded_runs, run_sheet
from embinit.workflow.specs import layer_spec, train_spec
from embinit.training.checkpoint import code_digest

# Committed tables built from committed records (results/offline-cpu/README.md: the offline run is in parts whose
# records accumulate); a Table 3 uses only some seeds of its cells and has its own test.
RESULTS = REPO / "results"
RECORD_TABLES = [
    RESULTS / "first-run/table1.csv",
    RESULTS / "offline-cpu/table1.csv",
    RESULTS / "offline-cpu/table7.csv",
    RESULTS / "offline-cpu/table9.csv",
    RESULTS / "offline-cpu/table11.csv",
]
RECORDS = sorted(REPO.glob("results/*/*/*/seed*/*/final.json"))
RUN_FILES = {"final": "/final.json", "metrics": "/metrics.parquet", "run": ""}  # a run's files, from its directory
TRANSLATION = [p for p in RECORDS if json.loads(p.read_text())["kind"] == "translation"]


# A table's metric and the final.json value it averages (accuracy as a fraction there, in % in the table).
RECORD_VALUE = {
    "bleu": lambda record: record["test_paper_bleu"],
    "sacrebleu": lambda record: record["test_sacrebleu"],
    "accuracy_pct": lambda record: 100 * record["best_valid_acc"],
    "best_valid_loss": lambda record: record["best_valid_loss"],
}


def run_finals(example_dir, block: str, initializer: str = "*", variant: str = "base") -> list:
    """The final.json of every committed seed of a run cell (`*` for every initializer)."""
    return sorted(example_dir.glob(f"{block}/{initializer}/seed*/{variant}/final.json"))


def assert_row_recomputes(table, row, runs: list) -> list[dict]:
    """A table row's mean and mean best epoch are those of its runs' records; returns the records."""
    where = (table, row.block, row.initializer, row.variant, row.metric)
    assert all(run.exists() and (run.parent / "metrics.parquet").exists() for run in runs), where
    records = [json.loads(run.read_text()) for run in runs]
    assert row.mean == pytest.approx(statistics.fmean(RECORD_VALUE[row.metric](r) for r in records)), where
    assert row.mean_best_epoch == pytest.approx(statistics.fmean(r["best_epoch"] for r in records)), where
    return records


@pytest.mark.parametrize("table", RECORD_TABLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_table_row_has_its_run_records_and_recomputes_from_them(table):
    for row in pd.read_csv(table).itertuples():
        runs = run_finals(table.parent, row.block, row.initializer, row.variant)
        assert len(runs) == row.n_seeds, (table, row.block, row.initializer, row.variant)
        assert_row_recomputes(table, row, runs)


@pytest.mark.parametrize("result_set", ["offline-cpu", "paper-scale-cpu"])
def test_table3_recomputes_from_its_cells_first_seeds_at_the_blocks_full_epochs(result_set):
    """Table 3 takes the first `table3.seeds` seeds of each cell (config/<result_set>.yaml), or of a variant's
    `table3.seeds_by_variant`, so the offline base cells use seed 0 of Table 1's three; every run it uses trained
    for the block's full epochs, and each side's input ratio is its metrics' at the best epoch."""
    config = result_set_config(result_set)
    block = config["table3"]["block"]
    table_path = RESULTS / result_set / "table3.csv"
    table = pd.read_csv(table_path)
    assert list(table.variant.unique()) == config["table3"]["variants"]
    cells = table.drop_duplicates("variant")[["embedding_trainable", "pos_encoding"]].astype(str)
    assert set(map(tuple, cells.values)) == {("True", "True"), ("True", "False"), ("False", "True"), ("False", "False")}
    assert set(table.block) == {block}
    for row in table.itertuples():
        seeds = seeds_of(config, block)[: cell_seeds(config["table3"], row.initializer, row.variant)]
        assert row.n_seeds == len(seeds), (row.initializer, row.variant)
        runs = [RESULTS / result_set / block / row.initializer / f"seed{k}" / row.variant / "final.json" for k in seeds]
        if row.metric in RATIOS:  # each side's input ratio, read from metrics.parquet at the record's best epoch
            best = [json.loads(run.read_text())["best_epoch"] for run in runs]
            values = [
                pd.read_parquet(run.with_name("metrics.parquet")).set_index("epoch").at[epoch, row.metric]
                for run, epoch in zip(runs, best)
            ]
            assert row.mean == pytest.approx(statistics.fmean(values)), (row.initializer, row.variant, row.metric)
            continue
        records = assert_row_recomputes(table_path, row, runs)
        assert {r["epochs"] for r in records} == {config["blocks"][block]["epochs"]}, (row.initializer, row.variant)


def test_offline_table5_recomputes_from_the_base_run_records():
    """Table 5's per-block settings and minutes per epoch are those of the block's committed base runs."""
    table, config = pd.read_csv(RESULTS / "offline-cpu/table5.csv"), result_set_config("offline-cpu")
    for row in table.itertuples():  # the block's own initializers: a sweep's runs (Table 12's) share its directory
        finals = [
            f for i in initializers_of(config, row.block) for f in run_finals(RESULTS / "offline-cpu", row.block, i)
        ]
        records = [json.loads(p.read_text()) for p in finals]
        assert len(records) == row.n_runs, row.block
        assert {record["epochs"] for record in records} == {row.epochs}, row.block
        minutes = statistics.fmean(record["train_minutes_per_epoch"] for record in records)
        assert row.train_minutes_per_epoch == pytest.approx(minutes), row.block


def assert_cell_recomputes(where, mean, n_seeds, finals: list) -> None:
    """A sweep table's accuracy cell (mean over seeds, in %) is that of its runs' final.json."""
    assert len(finals) == n_seeds, where
    accuracy = RECORD_VALUE["accuracy_pct"]
    assert mean == pytest.approx(statistics.fmean(accuracy(json.loads(f.read_text())) for f in finals)), where


def test_offline_table12_recomputes_from_its_runs_records():
    """Each (base, k) cell of Table 12 is the mean of its runs `<base>_x<k>` (the base's own runs at k = 1)."""
    config = result_set_config("offline-cpu")
    section, table = config["table12"], pd.read_csv(RESULTS / "offline-cpu/table12.csv")
    names = {(dose["base"], dose["k"]): name for name, dose in scaled_initializers(section).items()}
    assert sorted(table.k) == sorted(map(float, section["scales"]))
    for row in table.itertuples():
        for base in section["bases"]:
            finals = run_finals(RESULTS / "offline-cpu", section["block"], names[base, row.k])
            assert_cell_recomputes((base, row.k), getattr(row, f"{base}_mean"), getattr(row, f"{base}_n_seeds"), finals)


def test_offline_table13_recomputes_from_its_runs_records():
    """Each (lr, initializer) cell of Table 13 is the mean of the initializer's runs of that lr's variant, whose
    records carry that lr."""
    config = result_set_config("offline-cpu")
    section, table = config["table13"], pd.read_csv(RESULTS / "offline-cpu/table13.csv")
    assert sorted(table.lr) == sorted(section["lr"]) and set(table.variant) == set(lr_variants(config))
    for row in table.itertuples():
        for init in section["initializers"]:
            finals = run_finals(RESULTS / "offline-cpu", section["block"], init, row.variant)
            assert {json.loads(f.read_text())["lr"] for f in finals} == {row.lr}, (init, row.variant)
            assert_cell_recomputes(
                (init, row.lr), getattr(row, f"{init}_mean"), getattr(row, f"{init}_n_seeds"), finals
            )


def test_offline_table14_recomputes_from_its_runs_records():
    """Each Table 14 row's score is the mean of its runs' records, and each difference to a control the mean of the
    seed-paired differences of the two cells' records (the control's cell in the block its `controls` names)."""
    table = pd.read_csv(RESULTS / "offline-cpu/table14.csv")
    variant = result_set_config("offline-cpu")["table14"]["variant"]
    assert len(table), "table14.csv has no rows"

    def scores(block: str, initializer: str, metric: str) -> dict[int, float]:
        finals = run_finals(RESULTS / "offline-cpu", block, initializer, variant)
        return {int(f.parts[-3].removeprefix("seed")): RECORD_VALUE[metric](json.loads(f.read_text())) for f in finals}

    for row in table.itertuples():
        own = scores(row.block, row.initializer, row.metric)
        assert len(own) == row.score_n_seeds, (row.block, row.initializer)
        assert row.score_mean == pytest.approx(statistics.fmean(own.values())), (row.block, row.initializer)
        for prefix, control in (("vs_xavier", "Xavier"), ("vs_proposal", "Pretrained_Xavier")):
            if n_pairs := getattr(row, f"{prefix}_n_pairs"):
                ref = scores(row.controls, control, row.metric)
                pairs = [own[seed] - ref[seed] for seed in own if seed in ref]
                assert len(pairs) == n_pairs, (row.block, row.initializer, prefix)
                assert getattr(row, prefix) == pytest.approx(statistics.fmean(pairs)), (row.block, row.initializer)


def sacrebleu(ref: Path, hyps: list[Path], *options: str) -> dict[Path, float]:
    """Each hypothesis file's score against `ref` from one run of sacrebleu's command line (several systems: its
    JSON list; one: its bare score)."""
    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", *map(str, hyps), "-w", "4", *options]
    out = subprocess.run([*command, "-b"] if len(hyps) == 1 else command, capture_output=True, text=True, check=True)
    if len(hyps) == 1:
        return {hyps[0]: float(out.stdout)}
    return {Path(system["system"]): float(system["BLEU"]) for system in json.loads(out.stdout)}


@pytest.fixture(scope="module")
def recomputed() -> dict[Path, tuple[float, float]]:
    """Each committed translation run's paper BLEU and SacreBLEU from its files, by its final.json: one sacrebleu run
    per distinct reference file and kind of score (a block's runs share their references)."""
    scores: dict[Path, list[float]] = {final: [] for final in TRANSLATION}
    for kind, options in (("test.tok", ("-tok", "none", "-s", "none")), ("test", ())):
        by_reference: dict[bytes, list[Path]] = {}
        for final in TRANSLATION:
            by_reference.setdefault((final.parent / f"{kind}.ref.txt").read_bytes(), []).append(final)
        for finals in by_reference.values():
            hyps = [final.parent / f"{kind}.hyp.txt" for final in finals]
            got = sacrebleu(finals[0].parent / f"{kind}.ref.txt", hyps, *options)
            for final, hyp in zip(finals, hyps):
                scores[final].append(got[hyp])
    return {final: (paper, sacre) for final, (paper, sacre) in scores.items()}


RESULT_SETS = sorted({p.relative_to(RESULTS).parts[0] for p in RECORDS})


@pytest.mark.parametrize("result_set", RESULT_SETS)
def test_every_record_is_of_the_current_training_code_or_of_code_its_result_set_accepts(result_set):
    """A committed final.json's `training_code` is today's, or a digest its result set's config lists in
    `accepted_training_code` (else the workflow would train the run again, naming "training code")."""
    config, current = result_set_config(result_set), code_digest()
    stale = {}
    for final in (p for p in RECORDS if p.relative_to(RESULTS).parts[0] == result_set):
        if code_stale_reason(final, current, config["accepted_training_code"]):
            stale.setdefault(json.loads(final.read_text())["training_code"][:8], []).append(str(final))
    assert not stale, f"config/{result_set}.yaml does not accept: " + ", ".join(
        f"{digest} ({len(finals)} records, e.g. {finals[0]})" for digest, finals in stale.items()
    )


@pytest.mark.parametrize("result_set", RESULT_SETS)
def test_every_accepted_training_code_is_proven_to_train_as_todays(result_set):
    """Each digest a result set accepts leads to today's code through proofs (resources/code_proofs/): a sample run
    of the older code trained again under the newer gave the same numbers bit for bit, and the committed record it
    stands for holds one of the two runs' numbers."""
    accepted, current = result_set_config(result_set)["accepted_training_code"], code_digest()
    proofs = load_proofs(REPO / "resources" / "code_proofs")
    for digest in accepted:
        chain = proof_chain(digest, current, proofs)
        assert chain, (
            f"config/{result_set}.yaml accepts training code {digest} with no proof leading to today's {current[:8]} "
            "(tools/prove_training_code.py writes one)"
        )
        assert not [problem for proof in chain for problem in proof_problems(proof, REPO)]


@pytest.mark.parametrize("result_set", RESULT_SETS)
def test_every_committed_record_is_current_for_its_result_sets_config(result_set):
    """A committed final.json that holds a spec digest holds the one its result set's config plans today, so a user's
    run takes it as it is instead of retraining it (a config or spec change that keeps what a run does migrates
    the digests it changed: results READMEs say which)."""
    config = result_set_config(result_set)
    final = f"{REPO / config['results_dir']}/{{block}}/{{init}}/seed{{seed}}/{{variant}}/final.json"
    runs = run_sheet(config, {"final": final}, recorded_runs(config, REPO / config["results_dir"]))
    drawn = plotted(runs)
    checked, stale = 0, []
    for run in runs.drop_duplicates("final").itertuples():
        if Path(run.final).is_file() and json.loads(Path(run.final).read_text()).get("spec_digest"):
            checked += 1
            spec = train_spec(
                config,
                run.block,
                run.initializer,
                int(run.seed),
                run.variant,
                (run.block, run.initializer, run.variant) in drawn,
            )
            if why := stale_reason(run.final, spec.digest):
                stale.append(why)
    assert checked or result_set == "first-run", f"{result_set}: no record with a spec digest was checked"
    assert not stale, f"{len(stale)} stale records, e.g.:\n" + "\n".join(stale[:5])


def test_the_train_and_layer_rules_params_keep_the_plain_dicts_snakemake_recorded():
    """Snakemake's params trigger compares the repr of a rule's params with the one .snakemake/metadata recorded: a
    spec's `identity()` keeps the keys, in the order, of the dicts the rules passed before the specs were typed, so
    an upgrade reruns no job of a checkout that has metadata (an object there would be left out, and its absence
    would rerun every job once)."""
    config = result_set_config("offline-cpu")
    run = train_spec(config, "multi30k_glove6b50d_field", "Pretrained", 0, "nopos_recipe", False).identity()
    assert list(run) == [
        "kind", "model", "train", "variant", "epochs", "batch_size", "lr", "seed", "valid_bleu", "num_classes",
        "tokenizer", "languages", "position_code", "run",
    ]  # fmt: skip
    assert type(run["model"]) is dict and type(run["run"]) is dict
    layer = layer_spec(config, "multi30k_glove6b50d_field", "Pretrained", 0, "encoder").identity()
    assert list(layer) == ["initializer", "params", "fingerprint", "seed", "dim", "side"]


def test_committed_translation_runs_exist():
    assert TRANSLATION, "no committed translation run records under results/"


def test_one_system_scores_as_it_does_beside_others():
    """sacrebleu prints a bare score for one system and a JSON list for several: both read as the same number."""
    first, second = (final.parent for final in TRANSLATION[:2])
    alone = sacrebleu(first / "test.ref.txt", [first / "test.hyp.txt"])
    beside = sacrebleu(first / "test.ref.txt", [first / "test.hyp.txt", second / "test.hyp.txt"])
    assert alone == {first / "test.hyp.txt": beside[first / "test.hyp.txt"]} and len(beside) == 2


@pytest.mark.parametrize("final", TRANSLATION, ids=lambda p: str(p.parent.relative_to(REPO / "results")))
def test_paper_bleu_and_sacrebleu_recompute_from_the_committed_files(final, recomputed):
    record = json.loads(final.read_text())
    paper, sacre = recomputed[final]
    assert paper == pytest.approx(record["test_paper_bleu"], abs=0.01)
    assert sacre == pytest.approx(record["test_sacrebleu"], abs=0.01)


def test_offline_multi30k_xavier_runs_passed_their_validation_minimum():
    """The converged offline run's claim (results/offline-cpu/README.md, part 1): every Xavier run of Table 1's
    Multi30k rows reached its lowest validation loss before its last epoch."""
    table = pd.read_csv(RESULTS / "offline-cpu/table1.csv")
    rows = table[(table.task == "multi30k") & (table.initializer == "Xavier") & (table.metric == "bleu")]
    assert len(rows) == 1 and rows.n_seeds.iloc[0] >= 3
    row = rows.iloc[0]
    finals = run_finals(RESULTS / "offline-cpu", row.block, "Xavier", row.variant)
    assert len(finals) == row.n_seeds
    for final in finals:
        record = json.loads(final.read_text())
        assert record["best_epoch"] < record["epochs"], final


@pytest.mark.parametrize("result_set", ["offline-cpu", "paper-scale-cpu"])
def test_recipe_ablation_recomputes_from_its_runs_records(result_set):
    """Each variant's row of the recipe ablation (issue 40) is the mean of its runs' records, and the recipe's runs say
    in their records which model and batches they ran with."""
    config = result_set_config(result_set)
    section, table = config["recipe_ablation"], pd.read_csv(RESULTS / result_set / "recipe_ablation.csv")
    assert list(table.variant) == section["variants"]
    for row in table.itertuples():
        finals = run_finals(RESULTS / result_set, section["block"], "Xavier", row.variant)[
            : cell_seeds(section, "Xavier", row.variant)
        ]
        records = [json.loads(f.read_text()) for f in finals]
        assert len(records) == row.n_seeds, row.variant
        assert row.bleu == pytest.approx(statistics.fmean(r["test_paper_bleu"] for r in records)), row.variant
        assert row.best_valid_loss == pytest.approx(statistics.fmean(r["best_valid_loss"] for r in records))
        if row.model == "recipe":  # records from before issue 40 carry no such keys: the first model on buckets
            assert {(r["model_init"], r["final_norm"], r["batching"]) for r in records} == {
                ("recipe", True, row.batching)
            }


@pytest.mark.parametrize("result_set", ["first-run", "offline-cpu", "paper-scale-cpu"])
def test_committed_run_tables_hold_every_record_and_rebuild_from_them(result_set, monkeypatch):
    """results/<set>/runs.csv (and .parquet) has a row per committed run record, and is what embinit.reports.runs
    builds from those records today (README "Every run in one table")."""
    monkeypatch.chdir(REPO)
    config = result_set_config(result_set)
    res = config["results_dir"]
    paths = {name: f"{res}/{{block}}/{{init}}/seed{{seed}}/{{variant}}{tail}" for name, tail in RUN_FILES.items()}
    sheet = run_sheet(config, paths, recorded_runs(config, res))
    table = run_table(sheet[sheet.output == "runs"])
    committed = pd.read_parquet(RESULTS / result_set / "runs.parquet")
    pd.testing.assert_frame_equal(table, committed)
    assert (RESULTS / result_set / "runs.csv").read_text() == table.to_csv(index=False)
    records = {str(p.parent.relative_to(REPO)) for p in RECORDS if p.parts[len(RESULTS.parts)] == result_set}
    assert set(table.path) == records
