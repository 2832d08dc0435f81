import json
import shutil

import pandas as pd
import pytest

from conftest import DE, EN
from embinit.data.vocab import (
    BOS,
    EOS,
    PAD,
    SPECIALS,
    UNK,
    build,
    build_vocab,
    encode,
    load_detokenizer,
    load_tokenizer,
    read_references,
    write_detokenizer,
)


def _tiny_wordpiece(path, lowercase=True):
    """A real tokenizer.json (BERT-style WordPiece) built with the tokenizers library."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "a",
        "man",
        "dog",
        "red",
        "bike",
        "book",
        "reads",
        "ride",
        "##s",
        "two",
        ".",
        "the",
        "in",
        "park",
        "snow",
        "play",
        "woman",
        "runs",
        "women",
    ]
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(path))
    return words


def test_spacy_vocab_counts_min_freq_and_specials():
    tok = load_tokenizer("spacy", "en")
    tokens = tok.tokenize(["A man, a MAN.", "a dog"])
    assert tokens[0] == ["a", "man", ",", "a", "man", "."]
    vocab = build_vocab(tok, tokens, min_freq=2)
    assert vocab["token"].tolist() == [*SPECIALS, "a", "man"]
    assert vocab["count"].tolist() == [0, 0, 0, 0, 3, 2]
    assert vocab["lm_id"].isna().all() and vocab["index"].tolist() == list(range(6))
    assert encode([["a", "dog", "man"]], vocab) == [[BOS, 4, UNK, 5, EOS]]


def test_wordpiece_vocab_records_lm_ids(tmp_path):
    words = _tiny_wordpiece(tmp_path / "tokenizer.json")
    tok = load_tokenizer("bert", tokenizer_file=str(tmp_path / "tokenizer.json"))
    token_lists = tok.tokenize(EN)
    vocab = build_vocab(tok, token_lists, min_freq=2)
    specials = vocab[vocab["special"]]
    assert specials["lm_id"].tolist() == [words.index(w) for w in ("[UNK]", "[PAD]", "[CLS]", "[SEP]")]
    rest = vocab[~vocab["special"]]
    assert all(words[lm] == token for lm, token in zip(rest["lm_id"], rest["token"]))
    assert "man" in set(rest["token"]) and (rest["count"] >= 2).all()


def test_sentencepiece_vocab_and_detokenizer(tmp_path):
    tok = load_tokenizer("t5", tokenizer_file=_sentencepiece(tmp_path))
    assert tok.special_lm_ids() == {"<unk>": 2, "<pad>": 0, "<bos>": None, "<eos>": 1}
    vocab = build_vocab(tok, tok.tokenize(EN), min_freq=1)
    ids = encode(tok.tokenize([EN[0]]), vocab)[0]
    write_detokenizer(tmp_path / "detokenizer.json", vocab, tok)
    assert load_detokenizer(tmp_path / "detokenizer.json").detokenize(ids) == EN[0]


def _decoder(kind, tmp_path):
    """A decoder tokenizer of each kind, with the file a sub-word one is read from (None for spaCy)."""
    if kind == "spacy":
        return load_tokenizer("spacy", "en"), None
    if kind == "wordpiece":
        _tiny_wordpiece(tmp_path / "tokenizer.json")
        return load_tokenizer("bert", tokenizer_file=str(tmp_path / "tokenizer.json")), tmp_path / "tokenizer.json"
    path = _sentencepiece(tmp_path)
    return load_tokenizer("t5", tokenizer_file=path), path


def _decoded_by_the_tokenizer(tokenizer, vocab, ids):
    """Text of vocabulary indices as the tokenizer itself decodes them: <pad>, <bos>, <eos> dropped, the
    LM ids (sub-word) or the tokens (spaCy) of the rest handed to it."""
    kept = [i for i in ids if i not in (PAD, BOS, EOS)]
    tokens = [vocab["token"][i] for i in kept]
    lm_ids = [None if pd.isna(vocab["lm_id"][i]) else int(vocab["lm_id"][i]) for i in kept]
    return tokenizer.decode(tokens, lm_ids)


@pytest.mark.parametrize("kind", ["spacy", "wordpiece", "sentencepiece"])
def test_detokenizer_file_is_self_contained_and_decodes_as_the_tokenizer(tmp_path, kind):
    """The train job reads no tokenizer file: the detokenizer file alone gives the tokenizer's own decoding."""
    tok, tokenizer_file = _decoder(kind, tmp_path)
    vocab = build_vocab(tok, tok.tokenize(EN), min_freq=1)
    write_detokenizer(tmp_path / "detokenizer.json", vocab, tok)
    record = json.loads((tmp_path / "detokenizer.json").read_text())
    assert record["tokenizer"] == {"spacy": "spacy", "wordpiece": "hf", "sentencepiece": "sentencepiece"}[kind]
    assert record["lowercase"] is (kind != "sentencepiece") and record["tokens"] == vocab["token"].tolist()
    if tokenizer_file is not None:
        shutil.move(tokenizer_file, tmp_path / "moved")
    detokenizer = load_detokenizer(tmp_path / "detokenizer.json")
    assert detokenizer.tokens == vocab["token"].tolist()
    sentences = encode(tok.tokenize(EN + DE), vocab)  # German: unknown words too
    mixed = [[BOS, UNK, 4, 5, EOS, PAD], [6, UNK, UNK, 4], [], [BOS, EOS]]
    for ids in sentences + mixed:
        assert detokenizer.detokenize(ids) == _decoded_by_the_tokenizer(tok, vocab, ids)
    if kind != "wordpiece":  # the tiny WordPiece has no decoder: its pieces come back space-joined
        assert detokenizer.detokenize(sentences[0]) == (EN[0].lower() if kind == "spacy" else EN[0])


def test_detokenizer_of_an_unknown_format_is_refused(tmp_path):
    tok = load_tokenizer("spacy", "en")
    write_detokenizer(tmp_path / "d.json", build_vocab(tok, tok.tokenize(EN), 1), tok)
    record = json.loads((tmp_path / "d.json").read_text())
    (tmp_path / "d.json").write_text(json.dumps({**record, "format": 0}))
    with pytest.raises(ValueError, match="rebuilt by the vocab rule"):
        load_detokenizer(tmp_path / "d.json")


def test_build_translation_and_pair_classification(tmp_path):
    splits = {}
    for split in ("train", "valid", "test"):
        splits[split] = str(tmp_path / f"{split}.parquet")
        pd.DataFrame({"src": DE * 2, "tgt": EN * 2}).to_parquet(splits[split])
    tokenizers = {"encoder": load_tokenizer("spacy", "de"), "decoder": load_tokenizer("spacy", "en")}
    vocab_out = {s: str(tmp_path / f"v_{s}.parquet") for s in tokenizers}
    ids_out = {s: str(tmp_path / f"ids_{s}.parquet") for s in splits}
    refs_out = {s: str(tmp_path / f"refs_{s}.parquet") for s in ("valid", "test")}
    detok_out = str(tmp_path / "detokenizer.json")
    sizes = build("translation", splits, tokenizers, 2, vocab_out, ids_out, detok_out, refs_out)
    dec = pd.read_parquet(vocab_out["decoder"])
    assert sizes["decoder"] == len(dec) and "man" in set(dec["token"]) and "Man" not in set(dec["token"])
    test = pd.read_parquet(ids_out["test"])
    assert list(test.columns) == ["src_ids", "tgt_ids"]
    refs = pd.read_parquet(refs_out["test"])
    assert list(refs.columns) == ["ref", "ref_tokens"] and len(refs) == len(test)
    assert refs["ref"].tolist() == [s.lower() for s in EN * 2]  # spaCy lowercases: so do its references
    assert list(refs["ref_tokens"][0]) == EN[0].lower().split()
    assert read_references(refs_out["test"]).ref_tokens[0] == EN[0].lower().split()
    assert not (tmp_path / "refs_train.parquet").exists()
    assert load_detokenizer(detok_out).detokenize(list(test["tgt_ids"][0])) == EN[0].lower()

    pairs = {}
    for split in ("train", "valid"):
        pairs[split] = str(tmp_path / f"p_{split}.parquet")
        pd.DataFrame({"text_a": EN, "text_b": EN[::-1], "label": [0, 1, 2] * 2}).to_parquet(pairs[split])
    out = {s: str(tmp_path / f"pid_{s}.parquet") for s in pairs}
    encoder = {"encoder": load_tokenizer("spacy", "en")}
    build("classification", pairs, encoder, 1, {"encoder": str(tmp_path / "pv.parquet")}, out)
    with pytest.raises(ValueError, match="translation tasks only"):
        build("classification", pairs, encoder, 1, {"encoder": str(tmp_path / "pv.parquet")}, out, detok_out)
    row = pd.read_parquet(out["valid"]).iloc[0]
    ids = list(row["ids"])
    assert ids[0] == BOS and ids[-1] == EOS and ids.count(EOS) == 2 and UNK not in ids


def _sentencepiece(tmp_path):
    import sentencepiece as spm

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(EN * 20 + DE * 20))
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "spiece"),
        vocab_size=60,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return str(tmp_path / "spiece.model")


@pytest.mark.parametrize("kind", ["spacy", "wordpiece", "sentencepiece"])
def test_reference_tokens_are_what_a_perfect_translation_decodes_to(tmp_path, kind):
    """Paper BLEU compares the detokenizer's vocabulary tokens with `ref_tokens`: a perfect translation must
    score 100."""
    from embinit.training.scoring import paper_bleu

    decoder, _ = _decoder(kind, tmp_path)
    splits = {}
    for split in ("train", "valid", "test"):
        splits[split] = str(tmp_path / f"{split}.parquet")
        pd.DataFrame({"src": DE, "tgt": EN}).to_parquet(splits[split])
    ids_out = {s: str(tmp_path / f"ids_{s}.parquet") for s in splits}
    build(
        "translation",
        splits,
        {"encoder": load_tokenizer("spacy", "de"), "decoder": decoder},
        1,
        {s: str(tmp_path / f"v_{s}.parquet") for s in ("encoder", "decoder")},
        ids_out,
        str(tmp_path / "detokenizer.json"),
        {"test": str(tmp_path / "refs_test.parquet")},
    )
    test = pd.read_parquet(ids_out["test"])
    tokens = load_detokenizer(tmp_path / "detokenizer.json").tokens
    assert tokens == pd.read_parquet(tmp_path / "v_decoder.parquet")["token"].tolist()
    perfect = [" ".join(tokens[i] for i in ids[1:-1]) for ids in test["tgt_ids"]]
    references = [" ".join(t) for t in read_references(tmp_path / "refs_test.parquet").ref_tokens]
    assert perfect == references and UNK not in {i for ids in test["tgt_ids"] for i in ids}
    assert paper_bleu().corpus_score(perfect, [references]).score == pytest.approx(100)


def test_sub_word_unk_seen_often_keeps_only_the_special_row(tmp_path):
    _tiny_wordpiece(tmp_path / "tokenizer.json")
    tok = load_tokenizer("bert", tokenizer_file=str(tmp_path / "tokenizer.json"))
    token_lists = tok.tokenize(["zebra zebra man", "zebra man"])  # "zebra" is [UNK] to this vocabulary
    unk = tok.special_lm_ids()["<unk>"]
    assert sum(t.count(unk) for t in token_lists) == 3
    vocab = build_vocab(tok, token_lists, min_freq=1)
    assert vocab["lm_id"].tolist().count(unk) == 1 and vocab["token"].tolist()[4:] == ["man"]
