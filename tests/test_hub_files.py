"""Every hub file config.yaml fetches is one its repository has at the pinned revision (resources/hub_files.csv)."""

import pandas as pd

from conftest import REPO, load_default_config
from embinit.data.fetch import HubFile, hub_file

LISTING = REPO / "resources" / "hub_files.csv"


def listed() -> set[HubFile]:
    return {HubFile(*row) for row in pd.read_csv(LISTING, dtype=str).itertuples(index=False)}


def test_every_hub_remote_names_a_file_its_revision_has():
    hub = {
        rel: hub_file(r["url"]) for rel, r in load_default_config()["remotes"].items() if "huggingface.co" in r["url"]
    }
    assert None not in hub.values(), f"hub URLs not of the form .../resolve/<revision>/<file>: {hub}"
    assert {"google/mt5-base", "google-t5/t5-small"} <= {f.repo for f in hub.values()}
    missing = {rel: f for rel, f in hub.items() if f not in listed()}
    assert not missing, f"files {LISTING.name} does not list at their revision: {missing}"


def test_listing_knows_mt5_base_main_has_no_safetensors_or_tokenizer_json():
    files = {f.file for f in listed() if f.repo == "google/mt5-base" and f.revision == "main"}
    assert {"pytorch_model.bin", "spiece.model"} <= files
    assert not {"model.safetensors", "tokenizer.json"} & files


def test_hub_url_parsing():
    assert hub_file("https://huggingface.co/google/mt5-base/resolve/refs%2Fpr%2F5/model.safetensors") == HubFile(
        "google/mt5-base", "refs/pr/5", "model.safetensors"
    )
    assert hub_file("https://huggingface.co/datasets/IWSLT/iwslt2017/resolve/main/data/x/de-en.zip") == HubFile(
        "datasets/IWSLT/iwslt2017", "main", "data/x/de-en.zip"
    )
    assert hub_file("https://dl.fbaipublicfiles.com/glue/data/SST-2.zip") is None
