"""Snakemake script: tokenize one task's splits and build each side's vocabulary (embinit.data.vocab.build).

Expects:
  snakemake.input     one prepared parquet per split (named by split), tokenizer_file (sub-word tokenizers:
                      tokenizer.json or a sentencepiece model; empty for spaCy)
  snakemake.wildcards tokenizer ("spacy" or a source name)
  snakemake.params    kind, languages (side -> language), min_freq, splits, sides, evaluated (the splits scored
                      with BLEU: valid and test for translation, none otherwise), layout (only triggers reruns)
  snakemake.output    vocab_<side>, ids_<split>, and for translation detokenizer and references_<evaluated split>
  snakemake.log[0]    the job's log
"""

import logging

from embinit.data.vocab import build, load_tokenizer
from embinit.interrupt import quiet_interrupt
from embinit.io import job_log

quiet_interrupt(snakemake)

with job_log(snakemake.log[0]):
    p, out = snakemake.params, snakemake.output
    tokenizers = {
        side: load_tokenizer(snakemake.wildcards.tokenizer, p.languages[side], snakemake.input.tokenizer_file or None)
        for side in p.sides
    }
    sizes = build(
        p.kind,
        {s: snakemake.input[s] for s in p.splits},
        tokenizers,
        p.min_freq,
        {side: out[f"vocab_{side}"] for side in p.sides},
        {s: out[f"ids_{s}"] for s in p.splits},
        detokenizer_out=out.get("detokenizer"),
        references_out={s: out[f"references_{s}"] for s in p.evaluated},
    )
    logging.info("vocabulary sizes (with 4 specials): %s", sizes)
