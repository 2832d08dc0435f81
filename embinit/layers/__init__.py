"""Stage 2, embedding layers (rules/layers.smk): pre-trained matrices per vocabulary, initialized layers."""
