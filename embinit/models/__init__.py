"""The paper's two model shapes: encoder-decoder translator and encoder-only classifier."""
from embinit.models.classifier import Classifier
from embinit.models.translator import Translator, heads_for

__all__ = ["Classifier", "Translator", "heads_for"]
