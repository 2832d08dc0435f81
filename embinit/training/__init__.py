"""Stage 4, training (rules/training.smk): batches, the training loop, checkpoints, decoding and scoring.

Modules, one job each: `placement` (where a run runs), `device` (its torch device, threads and autocast),
`batching` (datasets and batches), `epoch` (the model, its optimizer, one training pass, validation loss),
`scoring` (greedy decoding, accuracy, BLEU), `checkpoint` (a run's identity and its resumable checkpoint),
`loop` (one run from start to final.json).
"""

from embinit.training.placement import Placement

__all__ = ["Placement"]
