"""Turn each dataset's raw files into Parquet splits with stable columns (docs/design.md).

Translation splits have `src` (German) and `tgt` (English); classification splits have `text_a`, `text_b`
(null unless the task has sentence pairs) and `label`. Malformed input (also a truncated gzip or bad UTF-8)
fails with its file, and its line where one is to blame.
"""

from __future__ import annotations

import csv
import gzip
import html
import re
import zlib
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd

from embinit.io import atomic_path

MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


class DataError(ValueError):
    pass


def _lines(path: Path) -> Iterator[str]:
    """The file's lines without their ends. Python's errors for a truncated gzip or bad UTF-8 name no file."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                yield line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{number}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError(f"{path}: truncated or corrupt gzip file ({e})") from None


def _read_lines(path: Path) -> list[str]:
    lines = list(_lines(path))
    if not lines:
        raise DataError(f"{path}: file is empty")
    return lines


def _check_aligned(src: list[str], tgt: list[str], src_path: Path, tgt_path: Path) -> None:
    """Both counts, not a line number: which line was lost cannot be known from the counts."""
    if len(src) != len(tgt):
        raise DataError(
            f"parallel files differ in length: {src_path} has {len(src)} sentences, {tgt_path} has {len(tgt)}"
        )
    for number, (s, t) in enumerate(zip(src, tgt), start=1):
        if not s.strip() or not t.strip():
            empty = src_path if not s.strip() else tgt_path
            raise DataError(f"{empty}:{number}: empty sentence in a parallel file")


def _multi30k_lines(path: Path) -> list[str]:
    return _read_lines(path)


_SEG = re.compile(r"<seg[^>]*>(.*?)</seg>")


def _iwslt_lines(path: Path) -> list[str]:
    """IWSLT train files interleave XML-ish tags with plain sentence lines; dev/test files wrap them in <seg>."""
    lines = _read_lines(path)
    if path.name.endswith(".xml"):
        return [html.unescape(m.group(1)).strip() for line in lines if (m := _SEG.search(line))]
    return [line.strip() for line in lines if not line.lstrip().startswith("<")]


def _translation(files: dict[str, Path], read: Callable[[Path], list[str]]) -> dict[str, pd.DataFrame]:
    splits = {}
    for split in ("train", "valid", "test"):
        src_path, tgt_path = files[f"{split}_src"], files[f"{split}_tgt"]
        src, tgt = read(src_path), read(tgt_path)
        _check_aligned(src, tgt, src_path, tgt_path)
        splits[split] = pd.DataFrame({"src": src, "tgt": tgt})
    return splits


def _read_tsv(path: Path, required: list[str]) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise DataError(f"{path}: file is empty")
    header = rows[0]
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"{path}:1: header {header} lacks column(s) {missing}")
    if len(rows) == 1:
        raise DataError(f"{path}: header only, no examples")
    return header, rows[1:]


def _sst2_split(path: Path) -> pd.DataFrame:
    header, rows = _read_tsv(path, ["sentence", "label"])
    sentence, label = header.index("sentence"), header.index("label")
    text, labels = [], []
    for number, row in enumerate(rows, start=2):
        if len(row) <= max(sentence, label) or row[label].strip() not in ("0", "1"):
            raise DataError(f"{path}:{number}: expected a sentence and a 0/1 label, got {row!r}")
        text.append(row[sentence].strip())
        labels.append(int(row[label]))
    return pd.DataFrame(
        {
            "text_a": text,
            "text_b": pd.Series([None] * len(text), dtype="string"),
            "label": pd.Series(labels, dtype="int64"),
        }
    )


def _mnli_split(path: Path) -> pd.DataFrame:
    header, rows = _read_tsv(path, ["sentence1", "sentence2", "gold_label"])
    a, b, g = header.index("sentence1"), header.index("sentence2"), header.index("gold_label")
    first, second, labels = [], [], []
    for number, row in enumerate(rows, start=2):
        if len(row) <= max(a, b, g) or row[g] not in MNLI_LABELS:
            raise DataError(
                f"{path}:{number}: expected two sentences and a label in {sorted(MNLI_LABELS)}, "
                f"got {row[g] if len(row) > g else 'no label'!r}"
            )
        first.append(row[a].strip())
        second.append(row[b].strip())
        labels.append(MNLI_LABELS[row[g]])
    return pd.DataFrame({"text_a": first, "text_b": second, "label": pd.Series(labels, dtype="int64")})


def _sst2(files: dict[str, Path]) -> dict[str, pd.DataFrame]:
    return {"train": _sst2_split(files["train"]), "valid": _sst2_split(files["valid"])}


def _mnli(files: dict[str, Path]) -> dict[str, pd.DataFrame]:
    return {split: _mnli_split(files[split]) for split in ("train", "valid", "test")}


FORMATS: dict[str, Callable[[dict[str, Path]], dict[str, pd.DataFrame]]] = {
    "multi30k": lambda files: _translation(files, _multi30k_lines),
    "iwslt": lambda files: _translation(files, _iwslt_lines),
    "glue_sst2": _sst2,
    "glue_mnli": _mnli,
}


def splits_of(fmt: str) -> list[str]:
    return ["train", "valid"] if fmt == "glue_sst2" else ["train", "valid", "test"]


def prepare(fmt: str, files: dict[str, str], outputs: dict[str, str]) -> dict[str, int]:
    """Read a dataset's raw files (roles as in config `tasks.<task>.files`) and write one Parquet per split."""
    splits = FORMATS[fmt]({role: Path(p) for role, p in files.items()})
    for split, frame in splits.items():
        with atomic_path(outputs[split]) as tmp:
            frame.to_parquet(tmp, index=False)
    return {split: len(frame) for split, frame in splits.items()}
