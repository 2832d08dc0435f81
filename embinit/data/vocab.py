"""Tokenization and vocabularies, built from the training split only (SPEC section 2).

Word level: blank spaCy tokenizers (en, de), lowercased. Sub-word level: the LM's own tokenizer
(`tokenizer.json` through HF `tokenizers`, or a sentencepiece `spiece.model` for T5/mT5); each vocabulary
entry then records its LM id, so the embedding stage can take exactly that row of the LM's matrix.
Rows 0..3 are always the specials, so indices agree across every vocabulary the pipeline builds.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from embinit.io import atomic_path

SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")
# Version of the tokenized-split columns; the vocab rule passes it as a param, so a new layout rebuilds them.
# 2: translation splits carry `ref_tokens`, the reference in the block's own tokens (the paper's BLEU).
SPLIT_LAYOUT = 2
UNK, PAD, BOS, EOS = range(4)

# How each special is spelled in the LM vocabularies we read; the first one present wins.
_LM_SPECIALS = {
    "<unk>": ("[UNK]", "<unk>"),
    "<pad>": ("[PAD]", "<pad>"),
    "<bos>": ("[CLS]", "<s>"),
    "<eos>": ("[SEP]", "</s>"),
}


class SpacyTokenizer:
    """Word-level: blank spaCy tokenizer rules of a language, lowercased; tokens are their own keys."""

    lowercase = True

    def __init__(self, lang: str | None):
        self.lang = lang

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        import spacy

        tokenizer = spacy.blank(self.lang).tokenizer
        return [[t.text.lower() for t in doc] for doc in tokenizer.pipe(texts, batch_size=2000)]

    def special_lm_ids(self) -> dict[str, int | None]:
        return dict.fromkeys(SPECIALS)

    def token_of(self, key: str) -> str:
        return key

    def lm_id_of(self, key) -> int | None:
        return None

    def decode(self, tokens: list[str], lm_ids: list[int | None]) -> str:
        return " ".join(tokens)


class HFTokenizer:
    """Sub-word: a Hugging Face `tokenizer.json`; keys are LM ids, the LM's own specials are not added."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self._tok.no_padding()
        self._tok.no_truncation()
        normalizer = json.loads(Path(path).read_text(encoding="utf-8")).get("normalizer") or {}
        self.lowercase = bool(normalizer.get("lowercase", False))

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return [enc.ids for enc in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def special_lm_ids(self) -> dict[str, int | None]:
        vocab = self._tok.get_vocab()
        return {s: next((vocab[c] for c in _LM_SPECIALS[s] if c in vocab), None) for s in SPECIALS}

    def token_of(self, key: int) -> str:
        return self._tok.id_to_token(key)

    def lm_id_of(self, key: int) -> int:
        return key

    def decode(self, tokens: list[str], lm_ids: list[int | None]) -> str:
        return self._tok.decode([i for i in lm_ids if i is not None], skip_special_tokens=True)


class SentencePieceTokenizer(HFTokenizer):
    """Sub-word: a sentencepiece model (T5, mT5); keys are LM ids."""

    lowercase = False

    def __init__(self, path: str):
        import sentencepiece

        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return self._sp.encode(list(texts))

    def special_lm_ids(self) -> dict[str, int | None]:
        ids = {
            "<unk>": self._sp.unk_id(),
            "<pad>": self._sp.pad_id(),
            "<bos>": self._sp.bos_id(),
            "<eos>": self._sp.eos_id(),
        }
        return {s: (i if i >= 0 else None) for s, i in ids.items()}

    def token_of(self, key: int) -> str:
        return self._sp.id_to_piece(key)

    def decode(self, tokens: list[str], lm_ids: list[int | None]) -> str:
        specials = {i for i in self.special_lm_ids().values() if i is not None}
        return self._sp.decode([i for i in lm_ids if i is not None and i not in specials])


def load_tokenizer(name: str, lang: str | None = None, tokenizer_file: str | None = None):
    """`spacy` (needs `lang`) or a sub-word source (needs its tokenizer file: .json or sentencepiece)."""
    if name == "spacy":
        return SpacyTokenizer(lang)
    if tokenizer_file is None:
        raise ValueError(f"tokenizer {name!r} needs its tokenizer file")
    if str(tokenizer_file).endswith(".json"):
        return HFTokenizer(tokenizer_file)
    return SentencePieceTokenizer(tokenizer_file)


def build_vocab(tokenizer, token_lists: list[list], min_freq: int) -> pd.DataFrame:
    """Specials, then every training key seen >= min_freq times, most frequent first (ties by key)."""
    counts = Counter(key for tokens in token_lists for key in tokens)
    special_ids = tokenizer.special_lm_ids()
    specials = {i for i in special_ids.values() if i is not None}  # e.g. a sub-word [UNK]: already row 0
    kept = sorted(
        (k for k, c in counts.items() if c >= min_freq and k not in specials), key=lambda k: (-counts[k], str(k))
    )
    rows = [(s, 0, True, special_ids[s]) for s in SPECIALS]
    rows += [(tokenizer.token_of(k), counts[k], False, tokenizer.lm_id_of(k)) for k in kept]
    frame = pd.DataFrame(rows, columns=["token", "count", "special", "lm_id"])
    frame.insert(0, "index", range(len(frame)))
    return frame.astype({"index": "int64", "count": "int64", "special": "bool", "lm_id": "Int64"})


def _key_to_index(vocab: pd.DataFrame) -> dict:
    words = vocab[~vocab["special"]]
    keys = words["token"] if words["lm_id"].isna().all() else words["lm_id"].astype("int64")
    return dict(zip(keys, words["index"]))


def encode(token_lists: list[list], vocab: pd.DataFrame) -> list[list[int]]:
    """Vocabulary indices of each token list, unknown keys as <unk>, wrapped in <bos> ... <eos>."""
    index = _key_to_index(vocab)
    return [[BOS, *(index.get(k, UNK) for k in tokens), EOS] for tokens in token_lists]


def make_detokenizer(
    vocab_path: str, tokenizer_name: str, tokenizer_file: str | None = None, lang: str | None = None
) -> Callable[[Sequence[int]], str]:
    """Turn model output (vocabulary indices, specials dropped) back into text for BLEU."""
    vocab = pd.read_parquet(vocab_path)
    tokenizer = load_tokenizer(tokenizer_name, lang, tokenizer_file)
    tokens = vocab["token"].tolist()
    lm_ids = [None if pd.isna(i) else int(i) for i in vocab["lm_id"]]

    def detokenize(ids: Sequence[int]) -> str:
        kept = [i for i in ids if i not in (PAD, BOS, EOS)]
        return tokenizer.decode([tokens[i] for i in kept], [lm_ids[i] for i in kept])

    return detokenize


def build(
    kind: str,
    splits: dict[str, str],
    tokenizers: dict[str, object],
    min_freq: int,
    vocab_out: dict[str, str],
    tokenized_out: dict[str, str],
) -> dict[str, int]:
    """Tokenize every split, build each side's vocabulary from train, write vocabularies and id lists.

    `tokenizers` maps side -> tokenizer; translation sides read `src` (encoder) and `tgt` (decoder),
    classification reads `text_a` (+ `text_b` for pairs, joined by <eos>).
    """
    frames = {split: pd.read_parquet(path) for split, path in splits.items()}
    pairs = kind == "classification" and frames["train"]["text_b"].notna().any()
    tokens = {}
    for split, frame in frames.items():
        if kind == "translation":
            tokens[("encoder", split)] = tokenizers["encoder"].tokenize(frame["src"].tolist())
            tokens[("decoder", split)] = tokenizers["decoder"].tokenize(frame["tgt"].tolist())
        else:
            first = tokenizers["encoder"].tokenize(frame["text_a"].tolist())
            second = tokenizers["encoder"].tokenize(frame["text_b"].fillna("").tolist()) if pairs else None
            tokens[("encoder", split)] = list(zip(first, second)) if pairs else first
    vocabs = {}
    for side in tokenizers:
        train_tokens = tokens[(side, "train")]
        if pairs:
            train_tokens = [a + b for a, b in train_tokens]
        vocabs[side] = build_vocab(tokenizers[side], train_tokens, min_freq)
        with atomic_path(vocab_out[side]) as tmp:
            vocabs[side].to_parquet(tmp, index=False)
    for split, frame in frames.items():
        if kind == "translation":
            decoder = tokenizers["decoder"]
            out = pd.DataFrame(
                {
                    "src_ids": encode(tokens[("encoder", split)], vocabs["encoder"]),
                    "tgt_ids": encode(tokens[("decoder", split)], vocabs["decoder"]),
                    "ref": frame["tgt"].str.lower() if decoder.lowercase else frame["tgt"],
                    "ref_tokens": [[decoder.token_of(k) for k in keys] for keys in tokens[("decoder", split)]],
                }
            )
        else:
            ids = _classification_ids(tokens[("encoder", split)], vocabs["encoder"], pairs)
            out = pd.DataFrame({"ids": ids, "label": frame["label"].astype("int64")})
        with atomic_path(tokenized_out[split]) as tmp:
            out.to_parquet(tmp, index=False)
    return {side: len(v) for side, v in vocabs.items()}


def _classification_ids(token_lists: list, vocab: pd.DataFrame, pairs: bool) -> list[list[int]]:
    if not pairs:
        return encode(token_lists, vocab)
    firsts = encode([a for a, _ in token_lists], vocab)
    seconds = encode([b for _, b in token_lists], vocab)
    return [a + b[1:] for a, b in zip(firsts, seconds)]  # <bos> a <eos> b <eos>
