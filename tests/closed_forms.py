"""Closed forms of the models' parameter counts, against which tests check num_parameters()."""

RELATIVE_BUCKETS = 32  # embinit.models.position.RelativeBias.buckets


def encoder_layer_parameters(dim: int, ffn_dim: int) -> int:
    attention = 4 * (dim * dim + dim)
    ffn = dim * ffn_dim + ffn_dim + ffn_dim * dim + dim
    return attention + ffn + 2 * (2 * dim)


def decoder_layer_parameters(dim: int, ffn_dim: int) -> int:
    return encoder_layer_parameters(dim, ffn_dim) + 4 * (dim * dim + dim) + 2 * dim


def position_parameters(pos_encoding: str, dim: int, max_len: int, heads: int) -> int:
    """One stack's position encoding: learned has a max_len x D table, relative a buckets x heads table;
    sinusoidal, rotary and none have none."""
    return {"learned": max_len * dim, "relative": RELATIVE_BUCKETS * heads}.get(pos_encoding, 0)


def translator_parameters(
    n_src: int,
    n_tgt: int,
    dim: int,
    ffn_dim: int = 512,
    layers: int = 3,
    pos_encoding: str = "sinusoidal",
    max_len: int = 256,
    heads: int = 8,
    output_embedding: str = "untied",
    final_norm: bool = True,
) -> int:
    """Closed form of Translator.num_parameters(): a tied output weight is the decoder's embedding (counted once);
    each stack's final LayerNorm has 2D."""
    embeddings = (n_src + n_tgt) * dim + 2 * position_parameters(pos_encoding, dim, max_len, heads)
    stacks = layers * (encoder_layer_parameters(dim, ffn_dim) + decoder_layer_parameters(dim, ffn_dim))
    stacks += 2 * 2 * dim * final_norm
    output = (0 if output_embedding == "tied" else dim * n_tgt) + n_tgt
    return embeddings + stacks + output


def classifier_parameters(
    n_vocab: int,
    dim: int,
    num_classes: int,
    ffn_dim: int = 512,
    layers: int = 3,
    pos_encoding: str = "sinusoidal",
    max_len: int = 256,
    heads: int = 8,
    final_norm: bool = True,
) -> int:
    """Closed form of Classifier.num_parameters(): the encoder stack's final LayerNorm has 2D."""
    positions = position_parameters(pos_encoding, dim, max_len, heads)
    encoder = layers * encoder_layer_parameters(dim, ffn_dim) + 2 * dim * final_norm
    return n_vocab * dim + positions + encoder + dim * num_classes + num_classes
