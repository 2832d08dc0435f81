"""Snakemake script: train and score one run (embinit.training.loop.train_run); see train_run for the spec keys.

input:  train, valid, test (tokenized parquet; SST-2 has no test), emb_encoder, emb_decoder (translation),
        vocab_encoder, vocab_decoder, tokenizer_file (sub-word blocks only)
params: spec (dict: kind, model, train, variant, epochs, batch_size, lr, seed, num_classes, run,
        tokenizer, languages)
output: final (final.json), metrics (metrics.parquet), in the run directory; log: one file
"""

from pathlib import Path

from embinit.training.loop import train_run
from embinit.data.vocab import make_detokenizer

inp = snakemake.input  # noqa: F821
spec = dict(
    snakemake.params.spec,  # noqa: F821
    data={split: inp.get(split) for split in ("train", "valid", "test")},
    embeddings={side: inp.get(f"emb_{side}") for side in ("encoder", "decoder")},
    vocab={side: inp.get(f"vocab_{side}") for side in ("encoder", "decoder")},
    tokenizer_file=inp.get("tokenizer_file"),
    log=snakemake.log[0],
    threads=snakemake.threads,
)  # noqa: F821
# where the job runs is not part of the run's identity (kept out of params so it triggers no rerun)
spec["train"] = dict(
    spec["train"],
    device=snakemake.config["train"]["device"],  # noqa: F821
    num_threads=snakemake.config["train"]["num_threads"],
)  # noqa: F821
detokenize = None
if spec["kind"] == "translation":
    detokenize = make_detokenizer(
        inp.vocab_decoder, spec["tokenizer"], inp.get("tokenizer_file") or None, spec["languages"]["decoder"]
    )
out_dir = Path(snakemake.output.final).parent  # noqa: F821
if Path(snakemake.output.metrics).parent != out_dir:  # noqa: F821
    raise ValueError("final.json and metrics.parquet must share the run directory")
train_run(spec, out_dir, detokenize)
