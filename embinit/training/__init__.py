"""Stage 4, training (rules/training.smk): where a run runs, its batches, one epoch loop for a run alone or a stack of
runs, checkpoints, decoding and scoring, and the loop from a run's spec to its final.json."""

from embinit.training.placement import Placement

__all__ = ["Placement"]
