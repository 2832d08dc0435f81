"""embinit.identity.proofs: a proof holds two runs of different training code that agree bit for bit, and chains to today's."""

import json

import pandas as pd
import pytest

from embinit.identity.proofs import differences, load_proofs, numbers, proof_chain, proof_problems, prove

ROWS = [{"epoch": 1, "train_loss": 0.5, "valid_loss": float("nan"), "train_seconds": 3.0},
        {"epoch": 2, "train_loss": 0.25, "valid_loss": 0.4, "train_seconds": 3.1}]  # fmt: skip


def run(path, code: str, rows=ROWS, **final):
    """A run directory as the train rule writes it, of training code `code`."""
    path.mkdir(parents=True)
    record = {"best_epoch": 2, "test_paper_bleu": 30.25, "device": "cpu (1 threads)", "training_code": code} | final
    (path / "final.json").write_text(json.dumps(record))
    pd.DataFrame(rows).to_parquet(path / "metrics.parquet")
    return path


def test_a_proof_needs_equal_numbers_and_ignores_where_and_how_fast(tmp_path):
    old = run(tmp_path / "results/set/b/X/seed0/base", "a" * 64)
    faster = [r | {"train_seconds": 1.0} for r in ROWS]
    new = run(tmp_path / "new", "b" * 64, faster, device="cuda", split_sizes={"train": 9})
    path = prove(old, new, "results/set/b/X/seed0/base/final.json", None, tmp_path / "proofs")
    assert path.name == "aaaaaaaa-bbbbbbbb.json"
    assert differences(numbers(new), numbers(old)) == []  # NaN equal to NaN, seconds and new fields left out
    (proof,) = load_proofs(tmp_path / "proofs")
    assert proof_chain("aaaaaaaa", "b" * 64, [proof]) == [proof] and proof_chain("aaaaaaaa", "c" * 64, [proof]) is None
    assert proof_problems(proof, tmp_path) == []

    off = run(tmp_path / "off", "c" * 64, [ROWS[0], ROWS[1] | {"train_loss": 0.25000000000000006}])
    with pytest.raises(ValueError, match="metrics epoch 2 train_loss"):
        prove(old, off, "x", None, tmp_path / "proofs")
    assert prove(old, off, "results/set/b/X/seed0/base/final.json", 1, tmp_path / "proofs").name.endswith(
        "-cccccccc.json"
    )


def test_a_translation_and_a_classification_proof_of_one_code_pair_are_both_kept(tmp_path):
    for kind in ("translation", "classification"):
        old = run(tmp_path / kind / "results/set/b/X/seed0/base", "a" * 64, kind=kind)
        prove(old, run(tmp_path / kind / "new", "b" * 64, kind=kind), "r", None, tmp_path / "proofs")
    assert sorted(p.name for p in (tmp_path / "proofs").iterdir()) == [
        "aaaaaaaa-bbbbbbbb-classification.json",
        "aaaaaaaa-bbbbbbbb-translation.json",
    ]


def test_proofs_chain_and_a_changed_record_breaks_its_proof(tmp_path):
    committed = run(tmp_path / "results/set/b/X/seed0/base", "a" * 64)
    record = "results/set/b/X/seed0/base/final.json"
    prove(committed, run(tmp_path / "r1", "b" * 64), record, None, tmp_path / "proofs")
    prove(run(tmp_path / "r2", "b" * 64), run(tmp_path / "r3", "c" * 64), record, None, tmp_path / "proofs")
    proofs = load_proofs(tmp_path / "proofs")
    chain = proof_chain("aaaaaaaa", "c" * 64, proofs)
    assert [p["new"]["training_code"][0] for p in chain] == ["b", "c"]
    assert proof_problems(chain[0], tmp_path) == []  # the record holds the old run's numbers
    assert "neither run's" in proof_problems(chain[1], tmp_path)[0]  # it is of code a, not b or c
    (committed / "final.json").write_text(
        json.dumps(json.loads((committed / "final.json").read_text()) | {"best_epoch": 1})
    )
    assert "final.best_epoch" in proof_problems(chain[0], tmp_path)[0]
