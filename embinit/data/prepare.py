"""Turn each dataset's raw files into Parquet splits with stable columns (docs/design.md).

Translation splits have `src` (German) and `tgt` (English); classification splits have `text_a`, `text_b`
(null unless the task has sentence pairs) and `label`. A role in config `tasks.<task>.files` names one file or a
list read one after another (IWSLT2017's test: tst2010 ... tst2015). Bad rows follow one policy for every task
(docs/assumptions.md): a row the format cannot read (a wrong field count, an unknown label, bad UTF-8, a truncated
gzip) fails with its file and line; a well-formed pair or row with an empty or blank-only sentence is kept or
dropped by `tasks.<task>.drop_empty`, and the log counts the dropped and names their lines. IWSLT2017 is read
pair for pair as the Hugging Face `iwslt2017` generator reads it (`_iwslt_pairs`).
"""

from __future__ import annotations

import csv
import gzip
import dataclasses
import html
import io
import logging
import os
import re
import zlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from embinit.io import atomic_path

log = logging.getLogger(__name__)

MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}
SST2_LABELS = {"0": 0, "1": 1}
SHOWN_DROPS = 10  # dropped rows named in the log; the rest are counted


class DataError(ValueError):
    pass


def _lines(path: Path) -> Iterator[str]:
    """The file's lines without their ends, a UTF-8 BOM on the first dropped; Python's errors for a truncated
    gzip or bad UTF-8 name no file."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                yield line.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{number}: not UTF-8 text ({e.reason} at byte {e.start} of the line)") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError(f"{path}: truncated or corrupt gzip file ({e})") from None


def _read_lines(path: Path) -> list[str]:
    lines = list(_lines(path))
    if not lines:
        raise DataError(f"{path}: file is empty")
    return lines


def _paths(value: str | os.PathLike | list) -> list[Path]:
    """A role's files: one path, or a list (a Snakemake named input list) read in its order."""
    return [Path(value)] if isinstance(value, (str, os.PathLike)) else [Path(p) for p in value]


def _is_blank(*sentences: str) -> bool:
    return any(not s.strip() for s in sentences)


def _report_dropped(split: str, what: str, where: list[str]) -> None:
    if where:
        more = f" and {len(where) - SHOWN_DROPS} more" if len(where) > SHOWN_DROPS else ""
        log.warning(
            "%s: dropped %d %s(s) with an empty or blank-only sentence: %s%s",
            split,
            len(where),
            what,
            ", ".join(where[:SHOWN_DROPS]),
            more,
        )


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a task's rows are read (config `tasks.<task>.drop_empty`, `unescape_entities`)."""

    drop_empty: bool = True  # drop a pair or row with an empty or blank-only sentence (logged)
    unescape_entities: bool = False  # IWSLT only: `&amp;` in a <seg> read as `&` (HF leaves it as written)
    train_rows: int | None = None  # a seeded sample of this many train rows, in file order; None: all of them


PairReader = Callable[[Path, Path, ReadOptions, list[str]], list[tuple[str, str]]]


def _multi30k_pairs(src_path: Path, tgt_path: Path, options: ReadOptions, dropped: list[str]) -> list[tuple[str, str]]:
    """Pairs by line number, lines as read: spaCy's tokens of double spaces reproduce the paper's vocabulary sizes."""
    src, tgt = _read_lines(src_path), _read_lines(tgt_path)
    if len(src) != len(tgt):  # both counts, not a line number: which line was lost cannot be known
        raise DataError(f"parallel files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}")
    pairs = []
    for number, (s, t) in enumerate(zip(src, tgt), start=1):
        if options.drop_empty and _is_blank(s, t):
            dropped.append(f"{src_path if _is_blank(s) else tgt_path}:{number}")
            continue
        pairs.append((s, t))
    log.info("%d pairs from %s and %s", len(pairs), src_path, tgt_path)
    return pairs


def _text_mode_lines(path: Path) -> list[str]:
    """The lines `open(path, encoding="utf-8")` yields: a BOM kept as U+FEFF; `\n`, `\r\n` and a lone `\r`
    each end a line (universal newlines)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        number = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{number}: not UTF-8 text ({e.reason})") from None
    if text.startswith("\ufeff"):
        log.warning("%s starts with a BOM: kept as U+FEFF, as HF reads it, so its first line is no tag line", path)
    return io.StringIO(text, newline=None).readlines()


_SEG_TEXT = re.compile(r"[^<>]*")  # a <seg>'s text ends at the next tag mark, as HF cuts it


def _seg_text(line: str, path: Path, number: int, options: ReadOptions) -> str:
    """HF's cut of a <seg> line: the text after its first `>` up to the next `<` or `>` (the first segment only,
    an unclosed one too), stripped."""
    _, mark, rest = line.partition(">")
    if not mark:  # HF's loader fails here with an IndexError
        raise DataError(f"{path}:{number}: no `>` on a line read as a <seg> line: {line[:80]!r}")
    text = _SEG_TEXT.match(rest)[0]
    return (html.unescape(text) if options.unescape_entities else text).strip()


def _iwslt_pairs(src_path: Path, tgt_path: Path, options: ReadOptions, dropped: list[str]) -> list[tuple[str, str]]:
    """Pairs as the HF `iwslt2017` generator yields them: lines zipped (the longer file's tail unread), both
    stripped; the source line decides: a `<seg` line gives both sides' <seg> text, another tag line is skipped
    with its partner, anything else is a pair as it stands (a target tag line included)."""
    src, tgt = _text_mode_lines(src_path), _text_mode_lines(tgt_path)
    if len(src) != len(tgt):
        log.warning(
            "%s has %d lines and %s %d: pairs stop at the shorter file, as HF's zip does",
            src_path,
            len(src),
            tgt_path,
            len(tgt),
        )
    pairs, one_sided = [], []
    for number, (s, t) in enumerate(zip(src, tgt), start=1):
        s, t = s.strip(), t.strip()
        if s.startswith("<seg") != t.startswith("<seg") or s.startswith("<") != t.startswith("<"):
            one_sided.append(f"{src_path if s.startswith('<') else tgt_path}:{number}")
        if s.startswith("<"):
            if not s.startswith("<seg"):
                continue
            s, t = _seg_text(s, src_path, number, options), _seg_text(t, tgt_path, number, options)
        if options.drop_empty and _is_blank(s, t):
            dropped.append(f"{src_path if _is_blank(s) else tgt_path}:{number}")
            continue
        pairs.append((s, t))
    if one_sided:
        log.warning(
            "%d tag line(s) facing a sentence or another tag, read as HF reads them (a source tag skips the pair, "
            "a target tag is kept as text): %s",
            len(one_sided),
            ", ".join(one_sided[:SHOWN_DROPS]),
        )
    log.info("%d pairs from %s and %s", len(pairs), src_path, tgt_path)
    return pairs


def _translation(files: dict, options: ReadOptions, pairs_of: PairReader) -> dict[str, pd.DataFrame]:
    roles = {
        split: (_paths(files[f"{split}_src"]), _paths(files[f"{split}_tgt"])) for split in ("train", "valid", "test")
    }
    for split, (src_paths, tgt_paths) in roles.items():
        if len(src_paths) != len(tgt_paths):
            raise DataError(
                f"config tasks.<task>.files: {split}_src names {len(src_paths)} files and {split}_tgt "
                f"{len(tgt_paths)}; they pair one to one, in order"
            )
    splits = {}
    for split, (src_paths, tgt_paths) in roles.items():
        pairs, dropped = [], []
        for src_path, tgt_path in zip(src_paths, tgt_paths):
            pairs += pairs_of(src_path, tgt_path, options, dropped)
        _report_dropped(split, "pair", dropped)
        splits[split] = pd.DataFrame({"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]})
    return splits


def _read_tsv(path: Path, required: list[str]) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header and the numbered rows; every row has the header's field count."""
    rows = list(csv.reader(_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows:
        raise DataError(f"{path}: file is empty")
    header = rows[0]
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"{path}:1: header {header} lacks column(s) {missing}")
    if len(rows) == 1:
        raise DataError(f"{path}: header only, no examples")
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(
                f"{path}:{number}: {len(row)} tab-separated field(s) where the header has {len(header)} "
                f"({', '.join(header)}); a tab inside a sentence, or a column too many or too few"
            )
    return header, enumerate(rows[1:], start=2)


def _classification(
    paths: list[Path], columns: list[str], label: str, labels: dict[str, int], split: str, options: ReadOptions
) -> pd.DataFrame:
    """Rows of the TSV files in order: `columns` hold the sentences, `label` one of `labels`."""
    texts, ids, dropped = [], [], []
    for path in paths:
        header, rows = _read_tsv(path, [*columns, label])
        at, label_at = [header.index(c) for c in columns], header.index(label)
        for number, row in rows:
            if row[label_at].strip() not in labels:
                raise DataError(f"{path}:{number}: label {row[label_at]!r} is not one of {sorted(labels)}")
            sentences = [row[i].strip() for i in at]
            if options.drop_empty and _is_blank(*sentences):
                dropped.append(f"{path}:{number}")
                continue
            texts.append(sentences)
            ids.append(labels[row[label_at].strip()])
    _report_dropped(split, "row", dropped)
    second = [t[1] for t in texts] if len(columns) == 2 else pd.Series([None] * len(texts), dtype="string")
    return pd.DataFrame({"text_a": [t[0] for t in texts], "text_b": second, "label": pd.Series(ids, dtype="int64")})


def _sst2(files: dict, options: ReadOptions) -> dict[str, pd.DataFrame]:
    return {
        s: _classification(_paths(files[s]), ["sentence"], "label", SST2_LABELS, s, options) for s in ("train", "valid")
    }


def _mnli(files: dict, options: ReadOptions) -> dict[str, pd.DataFrame]:
    return {
        s: _classification(_paths(files[s]), ["sentence1", "sentence2"], "gold_label", MNLI_LABELS, s, options)
        for s in ("train", "valid", "test")
    }


FORMATS: dict[str, Callable[[dict, ReadOptions], dict[str, pd.DataFrame]]] = {
    "multi30k": lambda files, options: _translation(files, options, _multi30k_pairs),
    "iwslt": lambda files, options: _translation(files, options, _iwslt_pairs),
    "glue_sst2": _sst2,
    "glue_mnli": _mnli,
}


def splits_of(task: dict) -> list[str]:
    """The splits of a config `tasks` entry: a dataset's as configured, SST-2 without test, the others all three."""
    if task["format"] == "hf_dataset":
        return [s for s in ("train", "valid", "test") if s in task["dataset"]["splits"]]
    return ["train", "valid"] if task["format"] == "glue_sst2" else ["train", "valid", "test"]


def prepare(
    fmt: str, files: dict[str, str | list[str]], outputs: dict[str, str], options: ReadOptions = ReadOptions()
) -> dict[str, int]:
    """Read a dataset's raw files (roles as in config `tasks.<task>.files`) and write one Parquet per split."""
    splits = FORMATS[fmt](files, options)
    if options.train_rows is not None:
        splits["train"] = sample_rows(splits["train"], options.train_rows)
    return write_splits(splits, outputs)


def sample_rows(frame: pd.DataFrame, rows: int) -> pd.DataFrame:
    """`rows` rows drawn once with seed 0 and kept in file order: a smaller train split that is the same on every
    machine (config `tasks.<task>.train_rows`)."""
    if rows > len(frame):
        raise DataError(f"tasks.<task>.train_rows: {rows} is more than the train split's {len(frame)} rows")
    keep = np.sort(np.random.default_rng(0).choice(len(frame), rows, replace=False))
    return frame.iloc[keep].reset_index(drop=True)


def write_splits(splits: dict[str, pd.DataFrame], outputs: dict[str, str]) -> dict[str, int]:
    """One Parquet per split, none unless every split has examples; the split sizes."""
    for split, frame in splits.items():
        if frame.empty:
            raise DataError(f"split {split!r} has no examples: it holds none, or every one was dropped (a blank text)")
    for split, frame in splits.items():
        with atomic_path(outputs[split]) as tmp:
            frame.to_parquet(tmp, index=False)
    return {split: len(frame) for split, frame in splits.items()}
