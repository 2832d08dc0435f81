"""The paper's two model shapes: encoder-decoder translator and encoder-only classifier."""

from embinit.models.classifier import Classifier
from embinit.models.config import ModelConfig
from embinit.models.translator import Translator

__all__ = ["Classifier", "ModelConfig", "Translator"]
