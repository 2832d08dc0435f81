"""Snakemake script: tokenize one task's splits and build each side's vocabulary (embinit.data.vocab)."""

import logging

from embinit.data.vocab import build, load_tokenizer

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
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
)
logging.info("vocabulary sizes (with 4 specials): %s", sizes)
