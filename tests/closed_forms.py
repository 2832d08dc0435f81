"""Closed forms of the models' parameter counts, against which tests check num_parameters()."""


def encoder_layer_parameters(dim: int, ffn_dim: int) -> int:
    attention = 4 * (dim * dim + dim)
    ffn = dim * ffn_dim + ffn_dim + ffn_dim * dim + dim
    return attention + ffn + 2 * (2 * dim)


def decoder_layer_parameters(dim: int, ffn_dim: int) -> int:
    return encoder_layer_parameters(dim, ffn_dim) + 4 * (dim * dim + dim) + 2 * dim


def translator_parameters(
    n_src: int,
    n_tgt: int,
    dim: int,
    ffn_dim: int = 512,
    layers: int = 3,
    pos_encoding: str = "sinusoidal",
    max_len: int = 256,
) -> int:
    """Closed form of Translator.num_parameters()."""
    positions = max_len * dim if pos_encoding == "learned" else 0
    embeddings = (n_src + n_tgt) * dim + 2 * positions
    stacks = layers * (encoder_layer_parameters(dim, ffn_dim) + decoder_layer_parameters(dim, ffn_dim))
    return embeddings + stacks + dim * n_tgt + n_tgt


def classifier_parameters(
    n_vocab: int,
    dim: int,
    num_classes: int,
    ffn_dim: int = 512,
    layers: int = 3,
    pos_encoding: str = "sinusoidal",
    max_len: int = 256,
) -> int:
    """Closed form of Classifier.num_parameters()."""
    positions = max_len * dim if pos_encoding == "learned" else 0
    encoder = layers * encoder_layer_parameters(dim, ffn_dim)
    return n_vocab * dim + positions + encoder + dim * num_classes + num_classes
