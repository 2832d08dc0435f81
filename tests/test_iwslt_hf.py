"""IWSLT2017 read pair for pair as the Hugging Face `iwslt2017` loader's generator reads it (issue 43), from a
synthetic de-en.zip in the published layout holding every case where a reader can differ."""

from __future__ import annotations

import logging
import re
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import IWSLT_TEST_SETS, _iwslt_train, _iwslt_xml, load_default_config
from embinit.data import fetch as fetch_module
from embinit.data.fetch import archive_members, fetch_members
from embinit.data.prepare import DataError, ReadOptions, prepare

ZIP_URL = "data/2017-01-trnted/texts/de/en/de-en.zip"
TASK = load_default_config()["tasks"]["iwslt2017"]
SHIPPED = ReadOptions(drop_empty=TASK["drop_empty"], unescape_entities=TASK["unescape_entities"])


def hf_generator(source_files: list[str], target_files: list[str]) -> list[tuple[str, str]]:
    """The HF generator's published logic (datasets/iwslt2017/iwslt2017.py, `_generate_examples`), restated: each
    file pair opened in text mode (UTF-8, universal newlines) and zipped line by line; both lines stripped; when
    the source line starts with `<`, a `<seg` line keeps, on both sides, what lies between the line's first `>`
    and the next `<`, any other tag line is skipped; every other pair is yielded as it stands."""
    pairs = []
    for source_file, target_file in zip(source_files, target_files):
        with open(source_file, encoding="utf-8") as sf, open(target_file, encoding="utf-8") as tf:
            for source_row, target_row in zip(sf, tf):
                source_row, target_row = source_row.strip(), target_row.strip()
                if source_row.startswith("<"):
                    if not source_row.startswith("<seg"):
                        continue
                    source_row = source_row.split(">")[1].split("<")[0].strip()
                    target_row = target_row.split(">")[1].split("<")[0].strip()
                pairs.append((source_row, target_row))
    return pairs


def _talks(prefix: str) -> list[list[tuple[str, str]]]:
    return [[(f"{prefix} Satz {i} .", f"{prefix} sentence {i} .") for i in (1, 2, 3)]]


def _edge_case_files() -> dict[str, bytes]:
    """The 16 files of de-en.zip (as `de-en/<name>`), with the cases where a reader can differ from HF's."""
    train = [
        [("  Danke ,\tChris .  ", "Thank you , Chris ."), ("AT&T baut Netze .", "AT&T builds networks .")],
        [("Hallo Welt .", "Hello world ."), ("", "An empty German line ."), ("Zweite Hälfte .", "Second half .")],
    ]
    de, en = _iwslt_train(train, 0), _iwslt_train(train, 1)
    de[7] = "<speaker>B. Speaker</speaker>"  # a German tag line facing "AT&T builds networks ."
    en[14] = "<talkid>9</talkid>"  # an English tag line facing "Hallo Welt ."
    de[16] = "Zweite\rHälfte ."  # a lone \r: a line end in text mode, so the German side is one line longer
    files = {"train.tags.de-en.de": de, "train.tags.de-en.en": en}
    dev = [
        [
            ('erste</seg><seg id="2">zweite', 'first</seg><seg id="2">second'),  # two <seg> on one line
            ("Notiz &amp; &notiz &lt;b&gt;", "Note &amp; &notiz &lt;b&gt;"),  # entities as written
            ("   ", ""),  # an empty pair
            ("a > b", "a > b"),  # a `>` inside the text: HF cuts there
        ]
    ]
    files["IWSLT17.TED.dev2010.de-en.de.xml"] = _iwslt_xml("dev2010", dev, 0)
    files["IWSLT17.TED.dev2010.de-en.en.xml"] = _iwslt_xml("dev2010", dev, 1)
    for s in IWSLT_TEST_SETS:
        files[f"IWSLT17.TED.{s}.de-en.de.xml"] = _iwslt_xml(s, _talks(s), 0)
        files[f"IWSLT17.TED.{s}.de-en.en.xml"] = _iwslt_xml(s, _talks(s), 1)
    tst2011 = files["IWSLT17.TED.tst2011.de-en.de.xml"]
    tst2011[9] = '<seg id="1"> tst2011 Satz 1 .'  # an unclosed <seg>
    files["IWSLT17.TED.tst2012.de-en.en.xml"].append("an English line too many")  # unequal lengths
    tst2013 = files["IWSLT17.TED.tst2013.de-en.en.xml"]
    tst2013[9] = '<seg id="1"></seg>'  # an empty English segment
    raw = {name: "".join(line + "\n" for line in lines).encode() for name, lines in files.items()}
    raw["IWSLT17.TED.tst2014.de-en.de.xml"] = b"\xef\xbb\xbf" + raw["IWSLT17.TED.tst2014.de-en.de.xml"]  # a BOM
    raw["IWSLT17.TED.tst2015.de-en.en.xml"] = raw["IWSLT17.TED.tst2015.de-en.en.xml"].replace(b"\n", b"\r\n")
    return raw


def _archive(tmp_path: Path) -> tuple[dict[str, dict], Path]:
    """The zip in the published layout, its config `remotes` entries pointing at it, and the raw directory."""
    archive = tmp_path / "de-en.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, data in _edge_case_files().items():
            z.writestr(f"de-en/{name}", data)
    config = load_default_config()
    remotes = {
        rel: {**remote, "url": archive.as_uri(), "sha256": None}
        for rel, remote in config["remotes"].items()
        if rel.startswith("iwslt2017/")
    }
    assert all(remote["member"].startswith("de-en/") for remote in remotes.values())
    return remotes, tmp_path / "raw"


def _files(raw: Path) -> dict:
    return {
        role: str(raw / p) if isinstance(p, str) else [str(raw / q) for q in p] for role, p in TASK["files"].items()
    }


def _ours(tmp_path: Path, files: dict, options: ReadOptions) -> dict[str, list[tuple[str, str]]]:
    outs = {s: str(tmp_path / f"{s}.parquet") for s in ("train", "valid", "test")}
    prepare("iwslt", files, outs, options)
    return {s: list(pd.read_parquet(o).itertuples(index=False, name=None)) for s, o in outs.items()}


def _hf(files: dict) -> dict[str, list[tuple[str, str]]]:
    roles = {s: (files[f"{s}_src"], files[f"{s}_tgt"]) for s in ("train", "valid", "test")}
    return {s: hf_generator(*[[p] if isinstance(p, str) else p for p in pair]) for s, pair in roles.items()}


@pytest.fixture
def fetched(tmp_path, monkeypatch):
    """The 16 files fetched from the archive by one call, with its downloads and zip openings counted."""
    remotes, raw = _archive(tmp_path)
    counts = {"download": 0, "zip": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(fetch_module, "_download", counted("download", fetch_module._download))
    monkeypatch.setattr(fetch_module.zipfile, "ZipFile", counted("zip", zipfile.ZipFile))
    assert list(archive_members(remotes).values()) == [sorted(remotes)]
    fetch_members(remotes, {rel: raw / rel for rel in remotes})
    return raw, counts


def test_one_download_and_one_read_of_the_zip_for_all_16_members(fetched):
    raw, counts = fetched
    assert counts == {"download": 1, "zip": 1}
    assert len(list((raw / "iwslt2017/de-en").iterdir())) == 16 * 2  # each file and its .fetched.json


def test_the_shipped_default_reads_iwslt_pair_for_pair_as_the_hf_generator(fetched, tmp_path, caplog):
    raw, _ = fetched
    files = _files(raw)
    hf = _hf(files)
    # every edge case is in the archive, and HF reads each as described in docs/assumptions.md
    assert ("erste", "first") in hf["valid"]  # the first <seg> of a line
    assert ("Notiz &amp; &notiz &lt;b&gt;", "Note &amp; &notiz &lt;b&gt;") in hf["valid"]  # entities as written
    assert ("", "") in hf["valid"] and ("a", "a") in hf["valid"]  # an empty pair kept; a `>` in the text cuts it
    assert ("Danke ,\tChris .", "Thank you , Chris .") in hf["train"]  # stripped at both ends only
    assert not any(t == "AT&T builds networks ." for _, t in hf["train"])  # a German tag line skips the pair
    assert ("Hallo Welt .", "<talkid>9</talkid>") in hf["train"]  # an English tag line facing a sentence is text
    assert ("", "An empty German line .") in hf["train"]  # an empty side kept
    assert ("Zweite", "Second half .") in hf["train"]  # the lone \r ended the line: "Hälfte ." is left unread
    assert not any("Hälfte" in s for s, _ in hf["train"])
    assert ("tst2011 Satz 1 .", "tst2011 sentence 1 .") in hf["test"]  # an unclosed <seg>
    assert ("tst2013 Satz 1 .", "") in hf["test"]
    assert any(s.startswith("\ufeff") for s, _ in hf["test"])  # the BOM kept: the first line is no tag line
    assert len([p for p in hf["test"] if p[0].startswith("tst2012")]) == 3  # the extra English line unread

    caplog.set_level(logging.WARNING)
    assert _ours(tmp_path, files, SHIPPED) == hf
    assert re.search(
        r"tst2012\.de-en\.de\.xml has \d+ lines and .*tst2012\.de-en\.en\.xml \d+: pairs stop", caplog.text
    )
    assert "tst2014.de-en.de.xml starts with a BOM" in caplog.text
    assert f"{files['train_src']}:8, {files['train_tgt']}:15" in caplog.text  # tag lines facing sentences


def test_drop_empty_and_unescape_entities_are_the_only_departures(fetched, tmp_path):
    raw, _ = fetched
    files = _files(raw)
    hf = _hf(files)
    ours = _ours(tmp_path, files, ReadOptions(drop_empty=True, unescape_entities=False))
    assert ours == {s: [p for p in pairs if p[0].strip() and p[1].strip()] for s, pairs in hf.items()}
    assert [len(ours[s]) - len(hf[s]) for s in ours] == [-1, -1, -1]
    unescaped = _ours(tmp_path, files, ReadOptions(drop_empty=False, unescape_entities=True))["valid"]
    assert ("Notiz & ¬iz <b>", "Note & ¬iz <b>") in unescaped
    assert [p for p in unescaped if "&" not in p[0]] == [p for p in hf["valid"] if "&" not in p[0]]


def test_a_seg_line_without_its_bracket_fails_naming_file_and_line(tmp_path):
    """Where HF's generator stops (an IndexError), prepare stops naming the file and line."""
    remotes, raw = _archive(tmp_path)
    fetch_members(remotes, {rel: raw / rel for rel in remotes})
    files = _files(raw)
    dev_en = Path(files["valid_tgt"])
    lines = dev_en.read_text(encoding="utf-8").splitlines()
    assert lines[9].startswith('<seg id="1">')
    dev_en.write_text("\n".join([*lines[:9], '<seg id="1" first', *lines[10:]]) + "\n", encoding="utf-8")
    with pytest.raises(IndexError):
        _hf(files)
    with pytest.raises(DataError, match=rf"^{re.escape(str(dev_en))}:10: no `>` on a line read as a <seg> line"):
        _ours(tmp_path, files, SHIPPED)
