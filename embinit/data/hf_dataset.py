"""A task read from any Hugging Face dataset (config `tasks.<task>.format: hf_dataset`) with the `datasets` library.

`dataset.path` is a `save_to_disk` folder (read with `load_from_disk`) or anything `load_dataset` takes: a hub id,
read from the hub or, offline (HF_DATASETS_OFFLINE=1), from the library's cache; or a folder of data files.
Fields are named as `Dataset.flatten` names them, so a struct column's member is `translation.de`. The splits come
out in prepare's columns (docs/design.md), under the same bad-row policy as the file formats: a value the task
cannot read (a label outside the classes, a field that is not text) fails, naming the config key, split and row;
a row with an empty, blank or missing sentence is dropped and named in the log.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from embinit.data.prepare import SHOWN_DROPS, DataError, write_splits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HFDataset:
    """Config `tasks.<task>.dataset`: where the dataset is, and which of its splits and fields the task reads."""

    task: str
    kind: str  # translation | classification
    path: str
    name: str | None
    revision: str | None
    splits: dict[str, str]  # our split (train, valid, test) -> the dataset's split
    fields: dict[str, str]  # our column (src, tgt | text_a, text_b, label) -> the dataset's (flattened) field
    labels: tuple | None  # the label field's values in class order; None: the values are the class ids
    num_classes: int | None

    @classmethod
    def from_config(cls, task: str, kind: str, dataset: dict, num_classes: int | None = None) -> HFDataset:
        """The settings of config `tasks.<task>.dataset` (`dataset`) for a task of this kind."""
        d = dataset
        if kind == "translation":
            fields = {"src": d["src"], "tgt": d["tgt"]}
        else:
            fields = {**dict(zip(("text_a", "text_b"), d["text"])), "label": d["label"]}
        labels = tuple(d["labels"]) if d.get("labels") is not None else None
        splits = dict(d["splits"])
        return cls(task, kind, d["path"], d.get("name"), d.get("revision"), splits, fields, labels, num_classes)

    def key(self, part: str) -> str:
        return f"tasks.{self.task}.dataset.{part}"

    def field_key(self, column: str) -> str:
        """The config key that names the field of `column`."""
        return {"src": "src", "tgt": "tgt", "text_a": "text[0]", "text_b": "text[1]", "label": "label"}[column]

    def describe(self) -> str:
        return self.path + (f" ({self.name})" if self.name else "")


def is_saved(path: str | Path) -> bool:
    """A `save_to_disk` folder: a DatasetDict's or a single Dataset's."""
    return any((Path(path) / f).is_file() for f in ("dataset_dict.json", "state.json"))


def saved_files(path: str | Path) -> list[str]:
    """The files that hold a `save_to_disk` folder's data, not the `cache-*.arrow` files a `.map()` on the loaded
    dataset writes beside them: a task that reads the folder reruns when these change, and only then."""
    return sorted(str(p) for p in Path(path).rglob("*") if p.is_file() and not p.name.startswith("cache-"))


def load(ds: HFDataset):
    """The dataset's splits as a DatasetDict, from its folder or through `load_dataset` (hub, cache, data files)."""
    import datasets  # only the jobs that read a dataset pay for its import

    if is_saved(ds.path):
        empty = [state.parent.name for state in sorted(Path(ds.path).glob("*/state.json"))
                 if not json.loads(state.read_text(encoding="utf-8")).get("_data_files")]  # fmt: skip
        if empty:  # datasets.load_from_disk fails on one with a bare IndexError
            raise DataError(
                f"config key {ds.key('path')}: split(s) {', '.join(empty)} of {ds.path} were saved with no rows; "
                "give every split examples, or leave an empty one out of the saved DatasetDict"
            )
        loaded = datasets.load_from_disk(ds.path)
        if not isinstance(loaded, datasets.DatasetDict):
            raise DataError(
                f"config key {ds.key('path')}: {ds.path} holds one Dataset without splits; save a DatasetDict "
                "(DatasetDict({'train': ..., 'validation': ...}).save_to_disk(path))"
            )
        return loaded
    try:
        return datasets.load_dataset(ds.path, ds.name, revision=ds.revision)
    except Exception as e:  # the library's own errors (not found, no network, unknown config) say what failed
        raise DataError(f"config key {ds.key('path')}: cannot load {ds.describe()}: {e}") from e


def _check_fields(ds: HFDataset, split: str, features) -> None:
    """Every configured field is in the split, the text fields hold strings, the label integers or strings."""
    import datasets

    for column, field in ds.fields.items():
        if field not in features:
            raise DataError(
                f"config key {ds.key(ds.field_key(column))}: field {field!r} is not in split {split!r} of "
                f"{ds.describe()}; its fields: {', '.join(features)}"
            )
        feature = features[field]
        dtype = getattr(feature, "dtype", None)  # a Value's or a ClassLabel's; None for lists, structs, media
        if column == "label":
            ok = isinstance(feature, datasets.ClassLabel) or (dtype or "").startswith(("int", "uint", "string"))
            ok = ok or dtype in ("large_string", "bool")
        else:
            ok = isinstance(feature, datasets.Value) and dtype in ("string", "large_string")
        if not ok:
            wanted = "integers or strings" if column == "label" else "text"
            raise DataError(
                f"config key {ds.key(ds.field_key(column))}: field {field!r} of split {split!r} holds {feature}, "
                f"not {wanted}"
            )


def _class_ids(ds: HFDataset, split: str, values: pd.Series, feature) -> pd.Series:
    """The label values as class ids 0..C-1: through `labels` when the config gives them, else as they are."""
    import datasets

    if isinstance(feature, datasets.ClassLabel) and ds.labels is None and feature.num_classes != ds.num_classes:
        raise DataError(
            f"config key tasks.{ds.task}.num_classes: {ds.num_classes}, but field {ds.fields['label']!r} has "
            f"{feature.num_classes} classes ({', '.join(feature.names)})"
        )
    if ds.labels is not None:
        ids = values.map({v: i for i, v in enumerate(ds.labels)})
        bad = ids.isna()
        allowed = f"one of {list(ds.labels)} (config key {ds.key('labels')})"
    else:
        ids = pd.to_numeric(values, errors="coerce")
        bad = ids.isna() | ~ids.between(0, ds.num_classes - 1) | (ids != ids.round())
        allowed = f"a class id 0..{ds.num_classes - 1} (give config key {ds.key('labels')} to map other values)"
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        value = values.iloc[row].item() if hasattr(values.iloc[row], "item") else values.iloc[row]  # numpy's: plain
        hint = "; -1 marks a hidden label, as in GLUE's test splits" if value == -1 else ""
        raise DataError(
            f"split {split!r} ({ds.splits[split]!r} of {ds.describe()}) row {row}: label {value!r} "
            f"of field {ds.fields['label']!r} is not {allowed}{hint}"
        )
    return ids.astype("int64")


def _frame(ds: HFDataset, split: str, data) -> pd.DataFrame:
    """One split in prepare's columns, its rows with a blank or missing sentence dropped (and named in the log)."""
    flat = data.flatten()
    _check_fields(ds, split, flat.features)
    raw = flat.select_columns(list(dict.fromkeys(ds.fields.values()))).to_pandas()
    frame = pd.DataFrame({column: raw[field] for column, field in ds.fields.items()})
    if ds.kind == "classification":  # every row's label is checked, a dropped row's too (as the TSV formats do)
        frame["label"] = _class_ids(ds, split, frame["label"], flat.features[ds.fields["label"]])
    texts = [c for c in frame.columns if c != "label"]
    blank = pd.Series(False, index=frame.index)
    for column in texts:
        frame[column] = frame[column].astype("string").str.strip()
        blank |= frame[column].isna() | (frame[column] == "")
    if blank.any():
        rows = blank.to_numpy().nonzero()[0].tolist()
        more = f" and {len(rows) - SHOWN_DROPS} more" if len(rows) > SHOWN_DROPS else ""
        log.warning(
            "%s: dropped %d row(s) of %s with an empty, blank or missing sentence: row(s) %s%s",
            split,
            len(rows),
            ds.describe(),
            ", ".join(map(str, rows[:SHOWN_DROPS])),
            more,
        )
    frame = frame[~blank].reset_index(drop=True)
    if ds.kind == "translation":
        return frame[["src", "tgt"]].astype(str)
    second = frame["text_b"] if "text_b" in frame else pd.Series([None] * len(frame), dtype="string")
    return pd.DataFrame({"text_a": frame["text_a"].astype(str), "text_b": second, "label": frame["label"]})


def read(ds: HFDataset) -> dict[str, pd.DataFrame]:
    """The task's splits (train, valid and, when configured, test) in prepare's columns."""
    loaded = load(ds)
    for ours, theirs in ds.splits.items():
        if theirs not in loaded:
            raise DataError(
                f"config key {ds.key(f'splits.{ours}')}: split {theirs!r} is not in {ds.describe()}; its splits: "
                f"{', '.join(loaded)}"
            )
    return {ours: _frame(ds, ours, loaded[theirs]) for ours, theirs in ds.splits.items()}


def prepare(ds: HFDataset, outputs: dict[str, str]) -> dict[str, int]:
    """Read the task's splits from the dataset and write one Parquet per split; their sizes."""
    return write_splits(read(ds), outputs)
