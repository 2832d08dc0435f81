"""Stage 3, models: the paper's encoder-decoder translator and encoder-only classifier, and their settings
(`embinit.models.config`, which imports no torch: the models load on first use, so the workflow's checks read it)."""

import importlib

_LAZY = {"Classifier": "classifier", "ModelConfig": "config", "Translator": "translator"}
__all__ = list(_LAZY)


def __getattr__(name: str):
    """The models import torch only when used: the workflow's checks import embinit.models.config without it."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
