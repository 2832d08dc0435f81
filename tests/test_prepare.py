import gzip
import re

import pandas as pd
import pytest

from conftest import DE, EN, write_gz_lines, write_tsv
from embinit.data.prepare import DataError, prepare


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
        f"parallel files differ in length: {files['train_src']} has 6 sentences, {files['train_tgt']} has 5"
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


def test_sst2_row_without_label_fails_with_line(tmp_path):
    write_tsv(tmp_path / "train.tsv", ["sentence", "label"], [["good film", "1"], ["no label here"]])
    write_tsv(tmp_path / "dev.tsv", ["sentence", "label"], [["good film", "1"]])
    with pytest.raises(DataError, match=r"train\.tsv:3: expected a sentence and a 0/1 label"):
        prepare(
            "glue_sst2",
            {"train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "dev.tsv")},
            {"train": str(tmp_path / "a.parquet"), "valid": str(tmp_path / "b.parquet")},
        )


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
    with pytest.raises(DataError, match=r"valid\.tsv:3: .*label"):
        prepare("glue_mnli", files, outs)


def test_iwslt_tags_and_xml_segments(tmp_path):
    train_de = tmp_path / "train.tags.de-en.de"
    train_en = tmp_path / "train.tags.de-en.en"
    train_de.write_text("<url>http://x</url>\n<talkid>1</talkid>\nHallo Welt .\nWie geht es ?\n")
    train_en.write_text("<url>http://x</url>\n<talkid>1</talkid>\nHello world .\nHow are you ?\n")
    files = {"train_src": str(train_de), "train_tgt": str(train_en)}
    for split in ("valid", "test"):
        for role, lang, text in (("src", "de", "Guten Tag &amp; mehr"), ("tgt", "en", "Good day &amp; more")):
            path = tmp_path / f"{split}.{lang}.xml"
            path.write_text(f'<doc docid="1">\n<seg id="1"> {text} </seg>\n</doc>\n')
            files[f"{split}_{role}"] = str(path)
    outs = {s: str(tmp_path / f"{s}.parquet") for s in ("train", "valid", "test")}
    assert prepare("iwslt", files, outs) == {"train": 2, "valid": 1, "test": 1}
    assert pd.read_parquet(outs["valid"]).iloc[0].tolist() == ["Guten Tag & mehr", "Good day & more"]
