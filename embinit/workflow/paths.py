"""Every artifact's path, once: templates ({braces} are wildcards) under config data_dir and results_dir."""

from __future__ import annotations

from dataclasses import dataclass

from snakemake.io import expand


def fill(template: str, **wildcards) -> str:
    """`template` with the given wildcards filled in; the others stay wildcards."""
    return expand(template, **wildcards, allow_missing=True)[0]


@dataclass(frozen=True)
class Paths:
    """The templates of one configuration, by stage (docs/design.md)."""

    # Data stage, under data_dir
    raw: str
    prepared: str
    vocab: str
    tokenized: str
    detokenizer: str  # decoder ids -> tokens and text (BLEU)
    references: str  # BLEU's references of a split
    data_log: str
    # Layers stage, under results_dir
    pretrained: str
    pretrained_tokens: str  # row -> token, matched or filled
    embedding: str
    layers_log: str
    # Training stage: one directory per run
    run: str
    final: str
    metrics: str
    trained: str  # the reported state's input embedding layers, by side
    # the job's log, this attempt's lines (Snakemake deletes it as a job starts); the run's train.log beside it,
    # which train_run appends to, keeps every attempt's
    attempt_log: str
    # A pack of runs trained in one job (rules/training.smk) of one invocation (its stamp): the runs it holds, its
    # record, its log
    pack_runs: str
    pack: str
    pack_log: str
    # Reports stage: an output of embinit/workflow/outputs.py is a file <name>.<suffix> per format (Output.formats: csv, md,
    # png, parquet, html) or a folder
    output_file: str
    folder: str  # TensorBoard's event files, the exported layers
    reports_log: str

    @classmethod
    def of(cls, data: str, res: str) -> Paths:
        run = f"{res}/{{block}}/{{init}}/seed{{seed}}/{{variant}}"
        vocab = f"{data}/vocab/{{task}}/{{tokenizer}}"
        return cls(
            raw=f"{data}/raw/{{relpath}}",
            prepared=f"{data}/prepared/{{task}}/{{split}}.parquet",
            vocab=f"{vocab}/{{side}}.parquet",
            tokenized=f"{data}/tokenized/{{task}}/{{tokenizer}}/{{split}}.parquet",
            detokenizer=f"{vocab}/detokenizer.json",
            references=f"{data}/references/{{task}}/{{tokenizer}}/{{split}}.parquet",
            data_log=f"{data}/logs/{{stage}}/{{name}}.log",
            pretrained=f"{res}/{{block}}/pretrained_{{side}}.npy",
            pretrained_tokens=f"{res}/{{block}}/pretrained_{{side}}.parquet",
            embedding=f"{res}/{{block}}/{{init}}/seed{{seed}}/embedding_{{side}}.npy",
            layers_log=f"{res}/{{block}}/logs/{{name}}.log",
            run=run,
            final=f"{run}/final.json",
            metrics=f"{run}/metrics.parquet",
            trained=f"{run}/embeddings.npz",
            attempt_log=f"{run}/attempt.log",
            pack_runs=f"{res}/.packs/{{stamp}}/pack{{index}}.runs.json",
            pack=f"{res}/.packs/{{stamp}}/pack{{index}}.json",
            pack_log=f"{res}/.packs/{{stamp}}/pack{{index}}.log",
            output_file=f"{res}/{{name}}.{{suffix}}",
            folder=f"{res}/{{name}}",
            reports_log=f"{res}/logs/{{name}}.log",
        )

    @property
    def run_files(self) -> dict[str, str]:
        """The run sheet's file columns."""
        return {"final": self.final, "metrics": self.metrics, "trained": self.trained, "run": self.run}

    @property
    def layer_files(self) -> dict[str, str]:
        """The layer sheet's file kinds."""
        return {
            "layer": self.embedding,
            "pretrained": self.pretrained,
            "tokens": self.pretrained_tokens,
            "vocab": self.vocab,
            "tokenizer": self.raw,
        }
