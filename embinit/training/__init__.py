"""Stage 4, training (rules/training.smk): batches, the training loop, checkpoints, decoding and scoring."""
