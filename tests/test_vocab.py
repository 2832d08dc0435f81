import pandas as pd
import pytest

from conftest import DE, EN
from embinit.data.vocab import BOS, EOS, SPECIALS, UNK, build, build_vocab, encode, load_tokenizer, make_detokenizer


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
    vocab.to_parquet(tmp_path / "vocab.parquet")
    ids = encode(tok.tokenize([EN[0]]), vocab)[0]
    detok = make_detokenizer(str(tmp_path / "vocab.parquet"), "t5", str(tmp_path / "spiece.model"))
    assert detok(ids) == EN[0]


def test_build_translation_and_pair_classification(tmp_path):
    splits = {}
    for split in ("train", "valid", "test"):
        splits[split] = str(tmp_path / f"{split}.parquet")
        pd.DataFrame({"src": DE * 2, "tgt": EN * 2}).to_parquet(splits[split])
    tokenizers = {"encoder": load_tokenizer("spacy", "de"), "decoder": load_tokenizer("spacy", "en")}
    vocab_out = {s: str(tmp_path / f"v_{s}.parquet") for s in tokenizers}
    ids_out = {s: str(tmp_path / f"ids_{s}.parquet") for s in splits}
    sizes = build("translation", splits, tokenizers, 2, vocab_out, ids_out)
    dec = pd.read_parquet(vocab_out["decoder"])
    assert sizes["decoder"] == len(dec) and "man" in set(dec["token"]) and "Man" not in set(dec["token"])
    test = pd.read_parquet(ids_out["test"])
    assert test["ref"][0] == EN[0].lower()
    detok = make_detokenizer(vocab_out["decoder"], "spacy")
    assert detok(list(test["tgt_ids"][0])) == EN[0].lower()

    pairs = {}
    for split in ("train", "valid"):
        pairs[split] = str(tmp_path / f"p_{split}.parquet")
        pd.DataFrame({"text_a": EN, "text_b": EN[::-1], "label": [0, 1, 2] * 2}).to_parquet(pairs[split])
    out = {s: str(tmp_path / f"pid_{s}.parquet") for s in pairs}
    build(
        "classification",
        pairs,
        {"encoder": load_tokenizer("spacy", "en")},
        1,
        {"encoder": str(tmp_path / "pv.parquet")},
        out,
    )
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
    """Paper BLEU compares vocabulary tokens with `ref_tokens`: a perfect translation must score 100."""
    from embinit.training.loop import paper_bleu

    if kind == "spacy":
        decoder = load_tokenizer("spacy", "en")
    elif kind == "wordpiece":
        _tiny_wordpiece(tmp_path / "tokenizer.json")
        decoder = load_tokenizer("bert", tokenizer_file=str(tmp_path / "tokenizer.json"))
    else:
        decoder = load_tokenizer("t5", tokenizer_file=_sentencepiece(tmp_path))
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
    )
    test = pd.read_parquet(ids_out["test"])
    tokens = pd.read_parquet(tmp_path / "v_decoder.parquet")["token"].tolist()
    perfect = [" ".join(tokens[i] for i in ids[1:-1]) for ids in test["tgt_ids"]]
    references = [" ".join(t) for t in test["ref_tokens"]]
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
