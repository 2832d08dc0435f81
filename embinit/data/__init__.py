"""Stage 1, data (rules/data.smk): raw files fetched, parsed into splits, tokenized with vocabularies."""
