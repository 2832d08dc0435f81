"""Tokenization and vocabularies, built from the training split only (SPEC section 2).

Word level: blank spaCy tokenizers (en, de), lowercased. Sub-word level: the LM's own tokenizer
(`tokenizer.json` through HF `tokenizers`, or a sentencepiece `spiece.model` for T5/mT5); each vocabulary
entry then records its LM id, so the embedding stage can take exactly that row of the LM's matrix.
Rows 0..3 are always the specials, so indices agree across every vocabulary the pipeline builds.

For a translation task the stage also writes what scoring needs, so the training job reads nothing else:
a detokenizer file (the decoder vocabulary with its tokenizer embedded; `write_detokenizer`,
`load_detokenizer`) and one references file per evaluated split (`write_references`, `read_references`).
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path
from typing import NamedTuple, Sequence

import pandas as pd

from embinit.io import atomic_path, damaged, reading, write_text_atomic

SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")
# Version of the tokenized-split columns; the vocab rule passes it as a param, so a new layout rebuilds them.
# 2: translation splits carry `ref_tokens`, the reference in the block's own tokens (the paper's BLEU).
# 3: translation splits hold only `src_ids`, `tgt_ids`; the references moved to their own files.
SPLIT_LAYOUT = 3
TRANSLATION_COLUMNS = ("src_ids", "tgt_ids")
DETOKENIZER_FORMAT = 1
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

    kind = "spacy"
    lowercase = True
    definition = None  # decoding needs no rules: the tokens joined by spaces

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
    """Sub-word: a Hugging Face `tokenizer.json` (its text is `definition`); keys are LM ids, the LM's own
    specials are not added."""

    kind = "hf"
    lang = None

    def __init__(self, definition: str):
        from tokenizers import Tokenizer

        self.definition = definition
        self._tok = Tokenizer.from_str(definition)
        self._tok.no_padding()
        self._tok.no_truncation()
        normalizer = json.loads(definition).get("normalizer") or {}
        self.lowercase = bool(normalizer.get("lowercase", False))

    @classmethod
    def from_file(cls, path: str) -> HFTokenizer:
        with reading(path, "tokenizer.json"):
            return cls(Path(path).read_text(encoding="utf-8"))

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


# Top-level fields of sentencepiece's ModelProto that its trainer always writes: a file without them was cut short
SPM_REQUIRED = {2: "trainer_spec", 3: "normalizer_spec"}


def _top_level_fields(proto: bytes) -> set[int]:
    """Field numbers of a protobuf message whose top-level fields are all length-delimited, as ModelProto's are.

    By hand: sentencepiece's own `sentencepiece_model_pb2` needs the protobuf package, no dependency of ours.
    """

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while i < len(proto):
            value, shift, i = value | (proto[i] & 0x7F) << shift, shift + 7, i + 1
            if proto[i - 1] < 0x80:
                break
        return value, i

    fields, i = set(), 0
    while i < len(proto):
        tag, i = varint(i)
        if tag & 7 != 2:  # not length-delimited: not a ModelProto field
            break
        length, i = varint(i)
        fields.add(tag >> 3)
        i += length
    return fields


class SentencePieceTokenizer(HFTokenizer):
    """Sub-word: a sentencepiece model (T5, mT5); keys are LM ids. `definition` is the serialized model
    proto in base64."""

    kind = "sentencepiece"
    lowercase = False

    def __init__(self, model_proto: bytes):
        import sentencepiece

        self.definition = base64.b64encode(model_proto).decode("ascii")
        self._sp = sentencepiece.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def from_file(cls, path: str) -> SentencePieceTokenizer:
        proto = Path(path).read_bytes()
        with reading(path, "sentencepiece model"):
            tokenizer = cls(proto)
        lacking = [name for number, name in SPM_REQUIRED.items() if number not in _top_level_fields(proto)]
        if lacking:  # sentencepiece loads a model cut between two of its fields without a word
            raise damaged(path, "sentencepiece model", f"it has no {' and no '.join(lacking)}")
        return tokenizer

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
        return HFTokenizer.from_file(tokenizer_file)
    return SentencePieceTokenizer.from_file(tokenizer_file)


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


class Detokenizer:
    """Decoder vocabulary indices back to the block's own tokens (`tokens`: what paper BLEU scores) and to
    text (`detokenize`: what standard sacreBLEU scores). Read from a detokenizer file (`load_detokenizer`)."""

    def __init__(self, tokens: Sequence[str], lm_ids: Sequence[int | None], tokenizer):
        self.tokens = list(tokens)
        self.lm_ids = list(lm_ids)
        self.tokenizer = tokenizer  # anything with the tokenizers' decode(tokens, lm_ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of model output (vocabulary indices); <pad>, <bos>, <eos> dropped, <unk> left to the tokenizer."""
        kept = [i for i in ids if i not in (PAD, BOS, EOS)]
        return self.tokenizer.decode([self.tokens[i] for i in kept], [self.lm_ids[i] for i in kept])


def write_detokenizer(path: str | Path, vocab: pd.DataFrame, tokenizer) -> None:
    """The decoder side's detokenizer file: one JSON object, self-contained (no other file is read back).

    {"format": 1, "tokenizer": "spacy" | "hf" | "sentencepiece", "language": the spaCy language or null,
    "lowercase": whether the tokenizer lowercases, "tokens": [the vocabulary's `token`, by index],
    "lm_ids": [the vocabulary's `lm_id` (int or null), by index], "definition": null (spacy), the
    tokenizer.json text (hf) or the base64 of the serialized sentencepiece model proto (sentencepiece)}
    """
    record = {
        "format": DETOKENIZER_FORMAT,
        "tokenizer": tokenizer.kind,
        "language": tokenizer.lang,
        "lowercase": bool(tokenizer.lowercase),
        "tokens": vocab["token"].tolist(),
        "lm_ids": [None if pd.isna(i) else int(i) for i in vocab["lm_id"]],
        "definition": tokenizer.definition,
    }
    write_text_atomic(path, json.dumps(record, ensure_ascii=False) + "\n")


def load_detokenizer(path: str | Path) -> Detokenizer:
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if record.get("format") != DETOKENIZER_FORMAT:
        raise ValueError(
            f"{path}: detokenizer format {record.get('format')!r}, expected {DETOKENIZER_FORMAT}; "
            "it is rebuilt by the vocab rule of its task"
        )
    kind = record["tokenizer"]
    if kind == "spacy":
        tokenizer = SpacyTokenizer(record["language"])
    elif kind == "hf":
        tokenizer = HFTokenizer(record["definition"])
    elif kind == "sentencepiece":
        tokenizer = SentencePieceTokenizer(base64.b64decode(record["definition"]))
    else:
        raise ValueError(f"{path}: unknown tokenizer kind {kind!r}")
    return Detokenizer(record["tokens"], record["lm_ids"], tokenizer)


class References(NamedTuple):
    """One split's BLEU references, one per sentence in the split's order: the text (`ref`, standard
    sacreBLEU) and its tokens in the block's own tokenization (`ref_tokens`, paper BLEU)."""

    ref: list[str]
    ref_tokens: list[list[str]]


def write_references(path: str | Path, references: References) -> None:
    """Parquet with columns `ref` (string) and `ref_tokens` (list of strings), one row per sentence."""
    frame = pd.DataFrame({"ref": references.ref, "ref_tokens": references.ref_tokens})
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def read_references(path: str | Path) -> References:
    frame = pd.read_parquet(path, columns=["ref", "ref_tokens"])
    return References(frame["ref"].tolist(), [list(tokens) for tokens in frame["ref_tokens"]])


def references_of(texts: pd.Series, keys: list[list], tokenizer) -> References:
    """The references of one split's target sentences (`keys`: their tokenization): the text, lowercased when
    the tokenizer lowercases, and the tokens."""
    return References(
        (texts.str.lower() if tokenizer.lowercase else texts).tolist(),
        [[tokenizer.token_of(k) for k in sentence] for sentence in keys],
    )


def build(
    kind: str,
    splits: dict[str, str],
    tokenizers: dict[str, object],
    min_freq: int,
    vocab_out: dict[str, str],
    tokenized_out: dict[str, str],
    detokenizer_out: str | None = None,
    references_out: dict[str, str] | None = None,
) -> dict[str, int]:
    """Tokenize every split, build each side's vocabulary from train, write vocabularies and id lists.

    `tokenizers` maps side -> tokenizer; translation sides read `src` (encoder) and `tgt` (decoder),
    classification reads `text_a` (+ `text_b` for pairs, joined by <eos>). Translation also writes the
    decoder's detokenizer file to `detokenizer_out` and the references of each split in `references_out`
    (split -> path: the evaluated splits); classification takes neither.
    """
    if kind != "translation" and (detokenizer_out or references_out):
        raise ValueError("a detokenizer and references are written for translation tasks only")
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
    if detokenizer_out:
        write_detokenizer(detokenizer_out, vocabs["decoder"], tokenizers["decoder"])
    for split, path in (references_out or {}).items():
        write_references(path, references_of(frames[split]["tgt"], tokens[("decoder", split)], tokenizers["decoder"]))
    for split, frame in frames.items():
        if kind == "translation":
            out = pd.DataFrame(
                {
                    "src_ids": encode(tokens[("encoder", split)], vocabs["encoder"]),
                    "tgt_ids": encode(tokens[("decoder", split)], vocabs["decoder"]),
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
