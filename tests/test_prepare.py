import gzip
import logging
import re

import pandas as pd
import pytest

from conftest import DE, EN, IWSLT_TEST_SETS, write_gz_lines, write_iwslt, write_tsv
from embinit.data.prepare import DataError, ReadOptions, prepare


def _multi30k_files(root, en=EN, de=DE):
    files = {}
    for split in ("train", "valid", "test"):
        for role, lang, lines in (("src", "de", de), ("tgt", "en", en)):
            path = root / f"{split}.{lang}.gz"
            write_gz_lines(path, lines)
            files[f"{split}_{role}"] = str(path)
    return files


def _outs(root):
    return {s: str(root / f"{s}.parquet") for s in ("train", "valid", "test")}


def test_multi30k_to_parquet(tmp_path):
    outs = _outs(tmp_path)
    sizes = prepare("multi30k", _multi30k_files(tmp_path), outs)
    assert sizes == {"train": 6, "valid": 6, "test": 6}
    frame = pd.read_parquet(outs["train"])
    assert list(frame.columns) == ["src", "tgt"]
    assert frame.iloc[0].tolist() == [DE[0], EN[0]]


def test_misaligned_parallel_files_fail_with_both_files_and_counts(tmp_path):
    files = _multi30k_files(tmp_path, en=EN[:2] + EN[3:])  # a line lost in the middle
    with pytest.raises(DataError) as error:
        prepare("multi30k", files, _outs(tmp_path))
    assert str(error.value) == (
        f"parallel files differ in length: {files['train_src']} has 6 lines, {files['train_tgt']} has 5"
    )
    assert not any((tmp_path / f"{s}.parquet").exists() for s in _outs(tmp_path))


def test_truncated_gzip_fails_with_its_name(tmp_path):
    files = _multi30k_files(tmp_path, en=EN * 50, de=DE * 50)
    path = tmp_path / "valid.en.gz"
    path.write_bytes(path.read_bytes()[:-20])  # loses the end of the deflate stream and the CRC trailer
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: truncated or corrupt gzip file \(Compressed"):
        prepare("multi30k", files, _outs(tmp_path))
    assert not any((tmp_path / f"{s}.parquet").exists() for s in _outs(tmp_path))


def test_corrupt_gzip_fails_with_its_name(tmp_path):
    files = _multi30k_files(tmp_path)
    path = tmp_path / "test.de.gz"
    data = bytearray(path.read_bytes())
    data[15:25] = b"\xff" * 10  # inside the deflate stream
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: truncated or corrupt gzip file"):
        prepare("multi30k", files, _outs(tmp_path))
    (tmp_path / "test.de.gz").write_text("not gzip at all\n")
    with pytest.raises(DataError, match=r"test\.de\.gz: truncated or corrupt gzip file \(Not a gzipped file"):
        prepare("multi30k", files, _outs(tmp_path))


def test_undecodable_utf8_fails_with_file_and_line(tmp_path):
    files = _multi30k_files(tmp_path)
    with gzip.open(tmp_path / "train.de.gz", "wb") as f:
        f.write("".join(line + "\n" for line in DE[:3]).encode() + b"Stra\xdfe\n" + "\n".join(DE[4:]).encode())
    with pytest.raises(DataError, match=r"train\.de\.gz:4: not UTF-8 text \(invalid continuation byte at byte 4"):
        prepare("multi30k", files, _outs(tmp_path))
    write_tsv(tmp_path / "dev.tsv", ["sentence", "label"], [["good film", "1"]])
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\nfine\t1\ncaf\xe9\t0\n")
    with pytest.raises(DataError, match=r"train\.tsv:3: not UTF-8 text"):
        prepare(
            "glue_sst2",
            {"train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "dev.tsv")},
            {"train": str(tmp_path / "a.parquet"), "valid": str(tmp_path / "b.parquet")},
        )


def test_empty_file_fails_with_its_name(tmp_path):
    files = _multi30k_files(tmp_path)
    write_gz_lines(tmp_path / "valid.en.gz", [])
    with pytest.raises(DataError, match=r"valid\.en\.gz: file is empty"):
        prepare("multi30k", files, _outs(tmp_path))


def test_mnli_pairs_and_labels(tmp_path):
    header = ["index", "sentence1", "sentence2", "gold_label"]
    rows = [
        ["0", "A man sleeps .", "A person rests .", "entailment"],
        ["1", "A dog runs .", "A cat sleeps .", "contradiction"],
    ]
    files, outs = {}, {}
    for split in ("train", "valid", "test"):
        write_tsv(tmp_path / f"{split}.tsv", header, rows)
        files[split], outs[split] = str(tmp_path / f"{split}.tsv"), str(tmp_path / f"{split}.parquet")
    prepare("glue_mnli", files, outs)
    frame = pd.read_parquet(outs["test"])
    assert frame["label"].tolist() == [0, 2] and frame["text_b"].tolist() == ["A person rests .", "A cat sleeps ."]
    write_tsv(tmp_path / "valid.tsv", header, [rows[0], ["2", "x", "y", "-"]])
    with pytest.raises(
        DataError, match=r"valid\.tsv:3: label '-' is not one of \['contradiction', 'entailment', 'neutral'\]$"
    ):
        prepare("glue_mnli", files, outs)


def test_iwslt_splits_are_the_hf_loaders_test_sets_concatenated_in_order(tmp_path):
    files = write_iwslt(tmp_path)
    assert [p.split("/")[-1] for p in files["test_tgt"]] == [f"IWSLT17.TED.{s}.de-en.en.xml" for s in IWSLT_TEST_SETS]
    outs = _outs(tmp_path)
    assert prepare("iwslt", files, outs) == {"train": 3, "valid": 1, "test": 12}
    test = pd.read_parquet(outs["test"])
    assert test["tgt"].tolist() == [f"sentence {s} {i}" for s in IWSLT_TEST_SETS for i in (1, 2)]
    assert test["src"].tolist()[:2] == ["Satz tst2010 1", "Satz tst2010 2"]
    assert pd.read_parquet(outs["train"])["src"].tolist() == ["Danke , Chris .", "AT&T baut Netze .", "Hallo Welt ."]
    assert pd.read_parquet(outs["valid"]).iloc[0].tolist() == ["Guten Tag &amp; mehr", "Good day &amp; more"]


def test_iwslt_test_split_of_the_configured_sets_only(tmp_path):
    files = write_iwslt(tmp_path)
    files["test_src"], files["test_tgt"] = files["test_src"][3:4], files["test_tgt"][3:4]  # tst2013 alone
    outs = _outs(tmp_path)
    assert prepare("iwslt", files, outs)["test"] == 2
    assert pd.read_parquet(outs["test"])["tgt"].tolist() == ["sentence tst2013 1", "sentence tst2013 2"]
    files["test_tgt"] = files["test_tgt"] * 2
    with pytest.raises(DataError, match=r"test_src names 1 files and test_tgt 2; they pair one to one"):
        prepare("iwslt", files, outs)


# Bad rows: one policy for every task (docs/assumptions.md). A sentence line of each task's small dataset, to spoil:
# (task, its files, the file, the line, that line blanked, the split it belongs to).
def _sst2_files(root):
    rows = [["a gripping film", "1"], ["dull", "0"], ["warm and funny", "1"]]
    write_tsv(root / "train.tsv", ["sentence", "label"], rows)
    write_tsv(root / "dev.tsv", ["sentence", "label"], rows)
    return {"train": str(root / "train.tsv"), "valid": str(root / "dev.tsv")}


def _mnli_files(root):
    header = ["index", "genre", "sentence1", "sentence2", "gold_label"]
    rows = [
        ["0", "fiction", "A man sleeps .", "A person rests .", "entailment"],
        ["1", "travel", "A dog runs .", "A cat sleeps .", "contradiction"],
        ["2", "slate", "It rains .", "It is wet .", "neutral"],
    ]
    for name in ("train", "dev_matched", "dev_mismatched"):
        write_tsv(root / f"{name}.tsv", header, rows)
    return {
        s: str(root / f"{n}.tsv") for s, n in (("train", "train"), ("valid", "dev_matched"), ("test", "dev_mismatched"))
    }


BAD_ROW_CASES = {
    "sst2": ("glue_sst2", _sst2_files, "train.tsv", 3, " \t0", "train"),
    "mnli": ("glue_mnli", _mnli_files, "dev_matched.tsv", 4, "2\tslate\tIt rains .\t  \tneutral", "valid"),
    "multi30k": ("multi30k", _multi30k_files, "valid.en.gz", 2, "   ", "valid"),
    "iwslt2017": (
        "iwslt",
        write_iwslt,
        "iwslt2017/de-en/IWSLT17.TED.tst2012.de-en.de.xml",
        10,
        '<seg id="1"></seg>',
        "test",
    ),
}


def _replace_line(path, number: int, text: str) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    lines[number - 1] = text
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _sizes(fmt, files, root):
    outs = {s: str(root / f"{s}.parquet") for s in ("train", "valid", "test")}
    return prepare(fmt, files, outs)


@pytest.mark.parametrize("task", BAD_ROW_CASES)
def test_blank_sentence_is_dropped_and_named_in_the_log_for_every_task(tmp_path, caplog, task):
    fmt, write, name, line, blanked, split = BAD_ROW_CASES[task]
    files = write(tmp_path)
    before = _sizes(fmt, files, tmp_path)
    _replace_line(tmp_path / name, line, blanked)
    caplog.set_level(logging.WARNING)
    after = _sizes(fmt, files, tmp_path)
    assert after == {**before, split: before[split] - 1}
    assert (
        f"{split}: dropped 1 {'row' if fmt.startswith('glue') else 'pair'}(s) with an empty or blank-only sentence: {tmp_path / name}:{line}"
        in caplog.messages
    )


@pytest.mark.parametrize("task", ["sst2", "mnli"])
def test_extra_column_fails_with_file_and_line(tmp_path, task):
    fmt, write, name, line, _, _ = BAD_ROW_CASES[task]
    files = write(tmp_path)
    path = tmp_path / name
    lines = path.read_text().splitlines()
    _replace_line(path, line, lines[line - 1] + "\tstray")
    columns = len(lines[0].split("\t"))
    with pytest.raises(
        DataError,
        match=rf"^{re.escape(str(path))}:{line}: {columns + 1} tab-separated field\(s\) where the header has {columns} ",
    ):
        _sizes(fmt, files, tmp_path)


@pytest.mark.parametrize("task", ["sst2", "mnli", "multi30k"])
def test_utf8_bom_is_read_as_no_text_for_every_task_but_iwslt(tmp_path, task):
    """Windows editors start a UTF-8 file with a BOM: the TSV header and the first line are read without it (IWSLT
    keeps it, as HF does: tests/test_iwslt_hf.py)."""
    fmt, write, name, _, _, _ = BAD_ROW_CASES[task]
    files = write(tmp_path)
    outs = {s: str(tmp_path / f"{s}.parquet") for s in ("train", "valid", "test")}
    before = prepare(fmt, files, outs)
    frames = {s: pd.read_parquet(p) for s, p in outs.items() if s in before}
    path = tmp_path / name
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + gzip.decompress(path.read_bytes())))
    else:
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert prepare(fmt, files, outs) == before
    assert all(pd.read_parquet(outs[s]).equals(frames[s]) for s in frames)


def test_train_rows_samples_the_train_split_alone_the_same_every_time(tmp_path):
    """`tasks.<task>.train_rows`: a seeded sample of the train split in file order; valid and test stay whole, and a
    sample larger than the split is refused."""
    outs = _outs(tmp_path)
    files = _multi30k_files(tmp_path)
    sizes = prepare("multi30k", files, outs, ReadOptions(train_rows=4))
    assert sizes == {"train": 4, "valid": 6, "test": 6}
    first = pd.read_parquet(outs["train"])
    assert first["src"].map(DE.index).is_monotonic_increasing and set(first["src"]) < set(DE)
    prepare("multi30k", files, outs, ReadOptions(train_rows=4))
    pd.testing.assert_frame_equal(pd.read_parquet(outs["train"]), first)
    with pytest.raises(DataError, match="train_rows: 7 is more than the train split's 6 rows"):
        prepare("multi30k", files, outs, ReadOptions(train_rows=7))
