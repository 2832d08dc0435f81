"""embinit.workflow.config: a bad config file or value fails at workflow load, naming the file or the key."""

import pytest
import yaml
from snakemake.utils import update_config

from conftest import REPO, load_default_config
from embinit.workflow.checks import check, check_schema, params_schema
from embinit.models.config import heads_for
from embinit.workflow.config import ConfigError, initializers_of, load, lr_of, validate, violations
from embinit.workflow.runsheet import plotted, run_sheet
from embinit.workflow.specs import train_spec
from embinit.workflow.runsheet import trained_blocks

SCHEMA = REPO / "schemas" / "config.schema.yaml"


def _config(overrides: dict) -> dict:
    """config.yaml with `overrides` merged in, as snakemake merges a --configfile."""
    config = load_default_config()
    update_config(config, overrides)
    return config


def _check_error(overrides: dict) -> str:
    with pytest.raises(ConfigError) as error:
        check(_config(overrides))
    return str(error.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "is empty; it must map config keys to values"),
        ("# only a comment\n", "is empty"),
        ("- a\n- list\n", "is a list; it must map config keys to values"),
        ("run_blocks: [sst2_glove,\nmodel: {}\n", "is not valid YAML"),
    ],
)
def test_load_names_the_file(tmp_path, text, expected):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^config file {path} {expected}"):
        load(path)


def test_load_yaml_error_gives_the_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"mirror: null\nrun_blocks: [a,\nb: c\n")
    with pytest.raises(ConfigError, match=r'while parsing a flow sequence\n  in "[^"]*c\.yaml", line 2, column 13'):
        load(path)
    path.write_bytes(b"mirror: caf\xe9\n")  # not UTF-8
    with pytest.raises(ConfigError, match=f"config file {path} is not valid YAML"):
        load(path)


def test_the_shipped_configs_pass():
    config = load(REPO / "config.yaml")
    validate(config, SCHEMA, ["config.yaml"])
    check(config)
    for overlay in ("offline-cpu.yaml", "paper-scale-cpu.yaml", "first-run.yaml"):
        merged = load(REPO / "config.yaml")
        update_config(merged, load(REPO / "config" / overlay))
        validate(merged, SCHEMA, ["config.yaml", overlay])
        check(merged)


def test_validate_lists_every_violation_on_one_line_each():
    config = _config(
        {
            "blocks": {"sst2_glove": {"epochs": "five", "epoch": 3, "lr": 0}},
            "run_blocks": [],
            "table4": {"side": "middle"},
            "extra": 1,
        }
    )
    config["tasks"] = []  # a whole section of the wrong type: its schema is not printed
    with pytest.raises(ConfigError) as error:
        validate(config, SCHEMA, ["config.yaml", "bad.yaml"])
    header, *lines = str(error.value).splitlines()
    assert header == f"the config from config.yaml, bad.yaml does not match {SCHEMA}:"
    assert lines == [
        "config key (top level): Additional properties are not allowed ('extra' was unexpected)",
        "config key blocks.sst2_glove: Additional properties are not allowed ('epoch' was unexpected)",
        "config key blocks.sst2_glove.epochs: 'five' is not of type 'integer'",
        "config key blocks.sst2_glove.lr: 0 is less than or equal to the minimum of 0",
        "config key run_blocks: [] should be non-empty",
        "config key table4.side: 'middle' is not one of ['encoder', 'decoder']",
        "config key tasks: [] is not of type 'object'",
    ]


def test_heads_must_divide_d_of_every_trained_block():
    assert (
        "config key model.heads: 7 heads do not divide D = 768 of block 'sst2_bert'; set model.heads_by_dim.768"
        in _check_error({"model": {"heads": 7}})
    )
    assert _check_error({"model": {"heads_by_dim": {300: 7}}}).startswith(
        "config key model.heads_by_dim.300: 7 heads do not divide D = 300 of block 'sst2_glove'"
    )
    # only blocks that train are checked: 12 heads fit 768 (BERT, mT5) and 384 (MiniLM), not T5's 512
    config = _config({"model": {"heads": 12}, "run_blocks": ["sst2_bert", "multi30k_mt5"]})
    assert "sst2_t5" not in trained_blocks(config)
    check(config)
    config["run_blocks"].append("sst2_t5")
    with pytest.raises(ConfigError, match="D = 512 of block 'sst2_t5'"):
        check(config)


def test_heads_for_uses_heads_by_dim_first():
    model = {"heads": 8, "heads_by_dim": {300: 10, "50": 5}}
    assert (heads_for(model, 300), heads_for(model, 50), heads_for(model, 768)) == (10, 5, 8)


@pytest.mark.parametrize(
    "params, expected",
    [
        (
            {"Pretrained_Shuffled": {"mode": "columns"}},
            "config key initializer_params.Pretrained_Shuffled.mode: 'columns' is not one of ['rows_columns', 'elements']",
        ),
        (
            {"Pretrained_Shuffled": {"mdoe": "elements"}},
            "config key initializer_params.Pretrained_Shuffled.mdoe: unknown name 'mdoe'; allowed: mode",
        ),
        (
            {"Pretrained_Gaussian": {"scale": "huge"}},
            "config key initializer_params.Pretrained_Gaussian.scale: 'huge' is not one of ['pretrained', 'xavier']",
        ),
        (
            {"Pretrained_Whitened": {"method": "pcx"}},
            "config key initializer_params.Pretrained_Whitened.method: 'pcx' is not one of ['zca', 'pca']",
        ),
        (
            {"Pretrained_RowNorm": {"norm": 1.0}},
            "config key initializer_params.Pretrained_RowNorm.norm: unknown name 'norm'; allowed: none",
        ),
        ({"Xavier": {"gain": 2}}, "config key initializer_params.Xavier.gain: unknown name 'gain'; allowed: none"),
        ({"Xavier": {"rng": 2}}, "config key initializer_params.Xavier.rng: unknown name 'rng'; allowed: none"),
    ],
)
def test_initializer_params_are_checked_against_the_function(params, expected):
    assert _check_error({"initializer_params": params}) == expected


def test_initializer_params_accept_every_allowed_value():
    for mode in ("rows_columns", "elements"):
        check(_config({"initializer_params": {"Pretrained_Shuffled": {"mode": mode}}}))
    for scale, method in (("pretrained", "zca"), ("xavier", "pca")):
        literature = {"Pretrained_Gaussian": {"scale": scale}, "Pretrained_Whitened": {"method": method}}
        check(_config({"initializer_params": {**literature, "Pretrained_RowNorm": {}}}))


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"table4": {"block": "multi30k_glvoe"}}, "config key table4.block: unknown name 'multi30k_glvoe'"),
        ({"table6": {"block": "nope"}}, "config key table6.block: unknown name 'nope'"),
        ({"figure1": {"blocks": ["multi30k_glove", "nope"]}}, "config key figure1.blocks[1]: unknown name 'nope'"),
        ({"figure1": {"seeds": {"multi30k_glvoe": 5}}}, "config key figure1.seeds.multi30k_glvoe: unknown name"),
        ({"table3": {"seeds_by_variant": {"frozn": 3}}}, "config key table3.seeds_by_variant.frozn: unknown name"),
        ({"table3": {"seeds_by_initializer": {"GloVe": 1}}}, "config key table3.seeds_by_initializer.GloVe: unknown"),
        (
            {"table3": {"seeds_by_initializer": {"Pretrained": {"nopos": 0, "frozn": 1}}}},
            "config key table3.seeds_by_initializer.Pretrained.frozn: unknown name",
        ),
        (
            {"table1": {"seeds_by_initializer": {"Pretrained_Xavir": 1}}},
            "config key table1.seeds_by_initializer.Pretrai",
        ),
        (
            {"table4": {"block": "sst2_glove", "side": "decoder"}},
            "config key table4.side: unknown name 'decoder'; allowed: encoder",
        ),
        (
            {"table6": {"block": "multi30k_glove6b50d", "side": "encoder"}},
            "config key table6.side: the encoder of block 'multi30k_glove6b50d' has no pre-trained source "
            "(blocks.multi30k_glove6b50d.sources.encoder is null); table6 needs one",
        ),
        ({"table3": {"block": "sst2_glove"}}, "config key table3.block: block 'sst2_glove' is not a translation block"),
        (
            {"figure1": {"blocks": ["sst2_bert"]}},
            "config key figure1.blocks[0]: block 'sst2_bert' is not a translation",
        ),
        ({"table9": {"variants": ["base", "rotray"]}}, "config key table9.variants[1]: unknown name 'rotray'"),
        ({"table9": {"blocks": ["nope"]}}, "config key table9.blocks[0]: unknown name 'nope'"),
        ({"figure2": {"initializers": ["Xavier", "Glove"]}}, "config key figure2.initializers[1]: unknown name"),
        (
            {"table11": {"blocks": ["sst2_glove"]}},
            "config key table11.blocks[0]: block 'sst2_glove' is not a translation",
        ),
        (
            {"table10": {"block": "multi30k_glove6b50d", "side": "encoder"}},
            "config key table10.side: the encoder of block 'multi30k_glove6b50d' has no pre-trained source",
        ),
    ],
)
def test_table_and_figure_blocks_fit_their_output(overrides, expected):
    assert _check_error(overrides).startswith(expected)


def test_a_block_without_a_source_takes_its_dim_from_the_block():
    from embinit.workflow.config import dim_of

    xavier_only = {"task": "multi30k", "sources": {"encoder": None, "decoder": None}, "epochs": 1, "batch_size": 8,
                   "seeds": 1, "family": "GloVe"}  # fmt: skip
    assert _check_error({"blocks": {"xavier_only": xavier_only}}) == (
        "config key blocks.xavier_only: a block with no pre-trained source needs `dim` (its D)"
    )
    config = load_default_config()
    update_config(config, {"blocks": {"xavier_only": {**xavier_only, "dim": 300}}})
    check(config)
    assert dim_of(config, "xavier_only") == 300
    assert dim_of(config, "multi30k_glove6b50d") == 50  # from its source
    assert _check_error({"blocks": {"multi30k_glove6b50d": {"dim": 300}}}).startswith(
        "config key blocks.multi30k_glove6b50d.dim: D = 300, but the decoder source 'glove6b50d' has d = 50"
    )


# A block at a D of its own (issue 41 item 2): only initializers that map the source's d to D, or ignore it
MAPPED = {"initializers": ["Xavier", "Pretrained", "Pretrained_Xavier", "Pretrained_PCA", "Pretrained_UpProject"]}


def test_a_block_at_another_dim_runs_the_initializers_that_map_to_it():
    from embinit.workflow.config import dim_of, initializers_of

    for block, dim, maps in (
        ("multi30k_glove6b50d", 300, "Pretrained_UpProject"),
        ("sst2_minilm", 50, "Pretrained_PCA"),
    ):
        config = _config({**MAPPED, "blocks": {block: {"dim": dim, "initializers": ["Xavier", maps]}}})
        check(config)
        assert dim_of(config, block) == dim
        assert initializers_of(config, block) == ["Xavier", maps]


@pytest.mark.parametrize(
    "block, dim, init, side, source, d, maps",
    [
        ("multi30k_glove6b50d", 300, "Pretrained_Xavier", "decoder", "glove6b50d", 50, "Pretrained_UpProject"),
        ("multi30k_glove6b50d", 300, "Pretrained_PCA", "decoder", "glove6b50d", 50, "Pretrained_UpProject"),
        ("sst2_minilm", 50, "Pretrained", "encoder", "minilm", 384, "Pretrained_PCA"),
        ("sst2_minilm", 50, "Pretrained_UpProject", "encoder", "minilm", 384, "Pretrained_PCA"),
    ],
)
def test_a_block_at_another_dim_names_the_initializer_that_does_not_map(block, dim, init, side, source, d, maps):
    overrides = {**MAPPED, "blocks": {block: {"dim": dim, "initializers": ["Xavier", init]}}}
    assert _check_error(overrides) == (
        f"config key blocks.{block}.dim: D = {dim}, but the {side} source {source!r} has d = {d} and initializer "
        f"{init!r} takes its rows as they are; at this D the block runs only initializers that map d to D ({maps}) "
        "or ignore the source (Xavier)"
    )


def test_a_sweep_on_a_block_at_another_dim_is_checked_by_its_entry():
    """Table 12 runs Scaled (base Pretrained_Xavier) on its block, whatever the block's own list says."""
    overrides = {**MAPPED, "blocks": {"sst2_minilm": {"dim": 50, "initializers": ["Xavier", "Pretrained_PCA"]}}}
    error = _check_error({**overrides, "table12": {"block": "sst2_minilm", "bases": ["Xavier"]}})
    assert "initializer 'Xavier_x0.25' (entry 'Scaled') takes its rows as they are" in error


def test_sources_of_two_dims_need_the_block_dim():
    sources = {"encoder": "glove_de", "decoder": "glove6b50d"}
    assert _check_error({"blocks": {"multi30k_glove6b50d": {"sources": sources}}}) == (
        "config key blocks.multi30k_glove6b50d: its sources have different dimensions [50, 300] and d_model is "
        "shared; set the block's `dim` and run initializers that map a source's d to it"
    )
    check(
        _config(
            {
                **MAPPED,
                "blocks": {
                    "multi30k_glove6b50d": {"sources": sources, "dim": 50, "initializers": ["Xavier", "Pretrained_PCA"]}
                },
            }
        )
    )


@pytest.mark.parametrize(
    "source, expected",
    [
        ({"level": "word", "word_rows": None}, "config key sources.minilm_words: a word-level hf source needs `word_rows`"),
        ({"level": "subword"}, "config key sources.minilm_words.word_rows: builds a word vocabulary's rows from a sub-word "
         "source's pieces; it needs format hf and level word, got format hf and level subword"),
        ({"files": {"tokenizer": None}}, "config key sources.minilm_words.files: word_rows needs the source's tokenizer"),
    ],
)  # fmt: skip
def test_word_rows_needs_a_word_level_hf_source_with_its_tokenizer(source, expected):
    config = load_default_config()
    entry = config["sources"]["minilm_words"]
    for key, value in source.items():
        if isinstance(value, dict):
            entry[key] = {k: v for k, v in entry[key].items() if k not in value}
        elif value is None:
            del entry[key]
        else:
            entry[key] = value
    with pytest.raises(ConfigError) as error:
        check(config)
    assert str(error.value).startswith(expected)


def test_word_rows_values_are_the_registry():
    import yaml

    from embinit.layers.readers import WORD_ROWS

    schema = yaml.safe_load(SCHEMA.read_text())
    assert schema["properties"]["sources"]["additionalProperties"]["properties"]["word_rows"]["enum"] == list(WORD_ROWS)


def test_a_block_lr_overrides_its_tasks_for_that_block_only():
    config = load_default_config()
    assert lr_of(config, "multi30k_glove") == config["tasks"]["multi30k"]["lr"] == 2.0e-4
    update_config(config, {"blocks": {"multi30k_glove": {"lr": 1.0e-3}}})
    assert lr_of(config, "multi30k_glove") == 1.0e-3
    assert lr_of(config, "multi30k_mbert") == 2.0e-4  # same task, its own block


def test_the_recipe_is_the_default_and_a_variant_or_result_set_says_otherwise():
    """model.init / final_norm and train.batching reach a run's spec from the config, or from its variant's own
    `model` / `train` (the recipe ablation); a result set made with the first model says so in its file."""

    def switches(config, variant, block="multi30k_glove"):
        spec = train_spec(config, block, "Xavier", 0, variant, False)
        return spec.model["init"], spec.model["final_norm"], spec.train["batching"]

    config = load_default_config()
    assert switches(config, "frozen") == ("recipe", True, "random")
    assert switches(config, "frozen_legacy") == ("legacy", False, "bucketed")
    assert switches(config, "frozen_bucketed") == ("recipe", True, "bucketed")  # the model's change alone
    assert switches(config, "frozen_legacy_model") == ("legacy", False, "random")  # the batches' change alone
    offline = _config(load(REPO / "config" / "offline-cpu.yaml"))
    assert switches(offline, "frozen", "multi30k_glove6b50d") == ("legacy", False, "bucketed")
    assert switches(offline, "frozen_recipe", "multi30k_glove6b50d") == ("recipe", True, "random")
    odd = {"odd": {**config["variants"]["base"], "model": {"heads": 4}}}
    lines = violations(load(SCHEMA), _config({"variants": odd}))
    assert "config key variants.odd.model: Additional properties are not allowed ('heads' was unexpected)" in lines
    # a batching's name is the registry's (embinit.registry.BATCHINGS), checked with the other names
    allowed = "allowed: bucketed, random"
    assert (
        _check_error({"train": {"batching": "sorted"}})
        == f"config key train.batching: unknown name 'sorted'; {allowed}"
    )
    assert _check_error({"variants": {"frozen_bucketed": {"train": {"batching": "sorted"}}}}) == (
        f"config key variants.frozen_bucketed.train.batching: unknown name 'sorted'; {allowed}"
    )


def test_validation_bleu_only_for_the_runs_figure1_plots_unless_forced():
    config = load_default_config()

    def valid_bleu(block, init, variant):
        shown = plotted(run_sheet(config, {}))
        return train_spec(config, block, init, 0, variant, (block, init, variant) in shown).valid_bleu

    assert valid_bleu("multi30k_glove", "Xavier", "base")
    assert not valid_bleu("multi30k_glove", "Xavier", "frozen")  # Table 3 reads loss and test BLEU
    assert not valid_bleu("multi30k_mbert", "Pretrained", "base")  # not a Figure 1 panel
    update_config(config, {"train": {"valid_bleu": True}})
    assert valid_bleu("multi30k_mbert", "Pretrained", "nopos")
    update_config(config, {"train": {"valid_bleu": False}})
    assert not valid_bleu("multi30k_glove", "Xavier", "base")


def test_extensions_are_loaded_first_and_their_errors_name_the_key(tmp_path):
    from conftest import isolated
    from embinit.layers.initializers import INITIALIZERS

    ext = tmp_path / "ext.py"
    ext.write_text("from embinit.layers.initializers import register\nregister('Copy_Ext')(lambda p, s, r: p)\n")
    clash = tmp_path / "clash.py"
    clash.write_text("from embinit.layers.initializers import register\nregister('Pretrained')(lambda p, s, r: p)\n")
    with isolated():
        assert _check_error({"extensions": [str(tmp_path / "nope.py")]}) == (
            f"config key extensions[0]: extension {tmp_path / 'nope.py'}: no such file"
        )
        assert _check_error({"extensions": [str(ext), str(clash)]}).startswith(
            f"config key extensions[1]: extension {clash}: initializer 'Pretrained' is already registered (built in)"
        )
        check(_config({"extensions": [str(ext)], "table3": {"initializers": ["Xavier", "Copy_Ext"]}}))
    assert "Copy_Ext" not in INITIALIZERS


def test_parameter_types_and_bounds_are_checked_by_a_schema_of_the_signature():
    from typing import Annotated, Literal

    from embinit.registry import AtLeast

    def fn(pretrained, shape, rng, k: Annotated[int, AtLeast(1)] = 1, x: float = 0.5, on: bool = True, s: str = "",
           mode: Literal["a", "b"] = "a"):  # fmt: skip
        pass

    schema = params_schema(fn)
    assert violations(schema, {"k": 3, "x": 1, "on": False, "s": "a", "mode": "b"}, "p") == []
    for params, expected in [
        ({"k": 0}, "config key p.k: 0 is less than the minimum of 1"),
        ({"k": True}, "config key p.k: True is not of type 'integer'"),
        ({"x": "1"}, "config key p.x: '1' is not of type 'number'"),
        ({"on": 1}, "config key p.on: 1 is not of type 'boolean'"),
        ({"s": 1}, "config key p.s: 1 is not of type 'string'"),
        ({"mode": "c"}, "config key p.mode: 'c' is not one of ['a', 'b']"),
    ]:
        assert violations(schema, params, "p") == [expected]
    # through check, with the key of the config and an extension-free built-in
    assert _check_error({"embeddings": {"missing_params": {"neighbors": {"k": 0}}}}).startswith(
        "config key embeddings.missing_params.neighbors.k: 0 is less than the minimum of 1"
    )


def test_a_classification_task_needs_num_classes_in_the_schema():
    config = _config({})
    del config["tasks"]["sst2"]["num_classes"]
    with pytest.raises(ConfigError, match=r"config key tasks.sst2: 'num_classes' is a required property"):
        validate(config, SCHEMA, ["config.yaml"])
    del config["tasks"]["multi30k"]["lr"]  # a translation task needs none; other keys are still required
    with pytest.raises(ConfigError, match=r"tasks.multi30k: 'lr' is a required property"):
        validate(config, SCHEMA, ["config.yaml"])


def test_a_word_source_from_pieces_shares_the_word_vocabulary():
    """GloVe and MiniLM's mean of pieces initialize one spaCy vocabulary: the block's tokenizer is spacy."""
    from embinit.workflow.config import tokenizer_of

    block = {"task": "sst2", "sources": {"encoder": "minilm_words"}, "epochs": 1, "batch_size": 8, "seeds": 1,
             "family": "BERT", "dim": 50, "initializers": ["Xavier", "Pretrained_PCA"]}  # fmt: skip
    config = _config({**MAPPED, "blocks": {"sst2_minilm_words": block}})
    check(config)
    assert tokenizer_of(config, "sst2_minilm_words") == tokenizer_of(config, "sst2_glove6b50d") == "spacy"
    assert tokenizer_of(config, "sst2_minilm") == "minilm"


def test_a_block_initializer_the_config_does_not_define_stops_naming_the_block_and_the_name():
    """A trained block's list naming an initializer the grid (`initializers`) lacks used to drop it from the
    block's runs unsaid; a name nothing defines is unknown in any block."""
    assert _check_error({"blocks": {"sst2_glove": {"initializers": ["Xavier", "Pretrained_Gaussian"]}}}) == (
        "config key blocks.sst2_glove.initializers[1]: block 'sst2_glove' names initializer 'Pretrained_Gaussian', "
        "which the config's `initializers` list does not define (Xavier, Pretrained, Pretrained_Xavier, "
        "Xavier_Pretrained, Pretrained_Shuffled); add it there or drop it from the block"
    )
    dormant = {"run_blocks": ["sst2_bert"], "blocks": {"mnli_glove": {"initializers": ["Pretrained_Gaussian"]}}}
    assert "mnli_glove" not in trained_blocks(_config(dormant))
    check(_config(dormant))  # its list drops nothing that runs
    dormant["blocks"]["mnli_glove"]["initializers"] = ["Pretraind"]
    assert _check_error(dormant).startswith("config key blocks.mnli_glove.initializers[0]: unknown name 'Pretraind'; ")
    config = _config({"blocks": {"sst2_glove": {"initializers": ["Xavier", "Pretrained_Gaussian"]}}})
    config["initializers"].append("Pretrained_Gaussian")  # defined: the block runs it
    check(config)
    assert initializers_of(config, "sst2_glove") == ["Xavier", "Pretrained_Gaussian"]


def _overlay_violations(tmp_path, text: str) -> list[str]:
    """The schema's lines for config.yaml with a config file of `text` on top, read as Snakemake reads it (YAML 1.1)."""
    path = tmp_path / "overlay.yaml"
    path.write_text(text)
    return violations(load(SCHEMA), _config(load(path)))


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "blocks: {sst2_glove: {epochs: 1.0}}",
            "config key blocks.sst2_glove.epochs: 1.0 is not of type 'integer' (write 1: a point makes it a float)",
        ),
        (
            "blocks: {sst2_glove: {seeds: 2.0}}",
            "config key blocks.sst2_glove.seeds: 2.0 is not of type 'integer' (write 2: a point makes it a float)",
        ),
        ("table3: {seeds: 1.5}", "config key table3.seeds: 1.5 is not of type 'integer'"),
        ("model: {dropout: 1.0}", "config key model.dropout: 1.0 is greater than or equal to the maximum of 1"),
        ("model: {dropout: -0.1}", "config key model.dropout: -0.1 is less than the minimum of 0"),
        (
            "tasks: {sst2: {lr: 1e-3}}",
            "config key tasks.sst2.lr: '1e-3' is not of type 'number' (YAML 1.1 reads 1e-3 as text, not a number: "
            "write 1.0e-3)",
        ),
        (
            "blocks: {sst2_glove: {lr: 2.5E4}}",
            "config key blocks.sst2_glove.lr: '2.5E4' is not of type 'number' (YAML 1.1 reads 2.5E4 as text, not a "
            "number: write 2.5e+4)",
        ),
        (
            "table13: {lr: [1.0e-4, 3e+3]}",
            "config key table13.lr[1]: '3e+3' is not of type 'number' (YAML 1.1 reads 3e+3 as text, not a number: "
            "write 3.0e+3)",
        ),
        ("tasks: {sst2: {lr: fast}}", "config key tasks.sst2.lr: 'fast' is not of type 'number'"),
    ],
)
def test_values_are_checked_by_meaning_naming_the_key_and_what_to_write(tmp_path, text, expected):
    assert _overlay_violations(tmp_path, text) == [expected]


def test_the_written_forms_the_hints_suggest_are_read_as_the_number_meant(tmp_path):
    for text in ("1e-3", "1E-3", "-2e-4", "+5e-1", "1.5e3", "1e+3", "12.25e2"):
        [line] = _overlay_violations(tmp_path, f"tasks: {{sst2: {{lr: {text}}}}}")
        written = line.rsplit("write ", 1)[1].rstrip(")")
        assert yaml.safe_load(f"lr: {written}")["lr"] == float(text), (text, written)
    # and what the shipped configs write passes: dropout below 1, floats with a point, integers without one
    assert (
        _overlay_violations(
            tmp_path, "model: {dropout: 0.0}\ntasks: {sst2: {lr: 1.0e-3}}\nblocks: {sst2_glove: {epochs: 1}}"
        )
        == []
    )
    assert _overlay_violations(tmp_path, "model: {dropout: 0.999}") == []


def test_integer_parameters_of_a_registry_entry_refuse_a_float():
    def fn(pretrained, shape, rng, k: int = 1, x: float = 0.5):
        pass

    schema = params_schema(fn)
    assert violations(schema, {"k": 2.0}, "p") == [
        "config key p.k: 2.0 is not of type 'integer' (write 2: a point makes it a float)"
    ]
    assert violations(schema, {"x": 2}, "p") == []  # an integer is a number
    assert violations(schema, {"x": "1e-2"}, "p") == [
        "config key p.x: '1e-2' is not of type 'number' (YAML 1.1 reads 1e-2 as text, not a number: write 1.0e-2)"
    ]


def test_a_number_given_as_text_through_config_says_where_it_came_from():
    """Issue 58: `--config "blocks={b: {epochs: 2}}"` reaches the workflow as '2', and the error only said that '2'
    is not an integer; it now names --config among the sources and says why."""
    overrides = {"blocks": {"sst2_glove6b50d": {"epochs": "2"}}}
    config = _config(overrides)
    with pytest.raises(ConfigError) as error:
        check_schema(config, SCHEMA, ["config.yaml"], overrides)
    assert "the config from config.yaml, --config does not match" in str(error.value)
    assert "config key blocks.sst2_glove6b50d.epochs: '2' is not of type 'integer'" in str(error.value)
    assert "Snakemake hands a value nested in a --config mapping to the workflow as text" in str(error.value)
    with pytest.raises(ConfigError) as error:  # from a config file: no word about --config
        check_schema(config, SCHEMA, ["mine.yaml"], {})
    assert "--config" not in str(error.value)


def test_allowed_rules_exceeded_names_the_planned_rules_beyond_them():
    from types import SimpleNamespace

    from embinit.workflow.checks import allowed_rules_exceeded

    def job(rule, output=("x",)):
        return SimpleNamespace(rule=SimpleNamespace(name=rule), output=list(output))

    jobs = [job("initialize_embedding"), job("train"), job("train"), job("all", output=())]
    assert allowed_rules_exceeded(frozenset(), jobs) is None  # no --allowed-rules: every rule
    assert allowed_rules_exceeded({"initialize_embedding", "train"}, jobs) is None
    said = allowed_rules_exceeded({"initialize_embedding"}, jobs)
    assert said.startswith(
        "--allowed-rules initialize_embedding, but Snakemake planned jobs of other rules too: train (2)"
    )
