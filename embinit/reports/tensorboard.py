"""TensorBoard's view of the runs (output `tensorboard`), written from their records, with no retraining: one event
file per run under <block>/<initializer>/seed<k>/<variant>/ holding its metrics.parquet per epoch and its final
scores, its settings as the HParams view's session, and one at the top naming the experiment's settings and metrics.

Event files are written with tensorboard's own record writer and protos; their wall times are the run's own training
and validation seconds summed up to each epoch (TensorBoard's "relative" axis is training time) and their names fixed,
so the same records give the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hp
from tensorboard.summary.writer.record_writer import RecordWriter

from embinit.reports.runs import DESCRIBED, SCORES

EVENTS = "events.out.tfevents.0.embinit"  # "tfevents" in the name is how TensorBoard finds an event file
TIMING = ["train_seconds", "valid_seconds", "tokens_per_second", "mechanism_seconds"]
LOSSES = ["train_loss", "valid_loss"]
MECHANISM = ("sigma_", "input_ratio_", "entropy_", "saturation_", "grad_norm_")
# the run settings the HParams view shows, and the final values it compares them by (tags of each run's file)
HPARAMS = [c for c in DESCRIBED if c not in ("label",)] + ["embedding_dim", "lr", "batch_size", "epochs"]
FINAL = ["best_valid_loss", "best_epoch"] + SCORES


def tag(column: str) -> str:
    """A metrics.parquet column's TensorBoard tag, in a section by kind: loss/, mechanism/, time/ or score/."""
    if column in LOSSES:
        return f"loss/{column}"
    if column in TIMING:
        return f"time/{column}"
    if column.startswith(MECHANISM):
        return f"mechanism/{column}"
    return f"score/{column}"


def _value(value):
    """A Python bool, number or string for the HParams protos; None for a missing one."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def _deterministic(summary: Summary) -> Summary:
    """The HParams summary with its plugin data serialized in key order (hparams_pb writes its map in hash order)."""
    for value in summary.value:
        data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
        value.metadata.plugin_data.content = data.SerializeToString(deterministic=True)
    return summary


def _write(path: Path, events: list[Event]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        writer = RecordWriter(f)
        for event in [Event(wall_time=0, file_version="brain.Event:2"), *events]:
            writer.write(event.SerializeToString(deterministic=True))
        writer.flush()


def _scalars(step: int, wall_time: float, values: dict[str, float]) -> Event:
    summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in values.items() if not math.isnan(v)])
    return Event(wall_time=wall_time, step=step, summary=summary)


def run_events(run: pd.Series, metrics: pd.DataFrame) -> list[Event]:
    """A run's events: its settings (the HParams session), each epoch's metrics, its final scores at its last epoch."""
    settings = {key: _value(run[key]) for key in HPARAMS if key in run}
    session = hp.hparams_pb({k: v for k, v in settings.items() if v is not None}, trial_id=run.path, start_time_secs=0)
    seconds = metrics[[c for c in ("train_seconds", "valid_seconds") if c in metrics]].sum(axis=1).cumsum()
    events = [Event(wall_time=0, summary=_deterministic(session))]
    for (_, row), wall_time in zip(metrics.iterrows(), seconds):
        values = {tag(c): float(row[c]) for c in metrics.columns if c != "epoch"}
        events.append(_scalars(int(row.epoch), float(wall_time), values))
    final = {f"final/{key}": float(run[key]) for key in FINAL if key in run and _value(run[key]) is not None}
    events.append(_scalars(int(metrics.epoch.max()), float(seconds.iloc[-1]), final))
    return events


def experiment(table: pd.DataFrame) -> Event:
    """The experiment's summary: the settings its runs vary by and the final metrics they are compared on."""
    metrics = [hp.Metric(f"final/{key}") for key in FINAL if key in table] + [hp.Metric("loss/valid_loss")]
    config = hp.hparams_config_pb([hp.HParam(key) for key in HPARAMS if key in table], metrics, time_created_secs=0)
    return Event(wall_time=0, summary=_deterministic(config))


def write_tensorboard(table: pd.DataFrame, metrics_paths: list[str], folder) -> pd.DataFrame:
    """Event files of every run of `table` (embinit.reports.runs.run_table), each from its metrics.parquet, under
    `folder`/<block>/<initializer>/seed<k>/<variant>/; returns the table."""
    folder = Path(folder)
    _write(folder / EVENTS, [experiment(table)])
    for (_, run), metrics in zip(table.iterrows(), metrics_paths):
        where = folder / run.block / run.initializer / f"seed{run.seed}" / run.variant / EVENTS
        _write(where, run_events(run, pd.read_parquet(metrics).sort_values("epoch")))
    return table
