"""embinit.workflow.extensions: the user's own files add initializers, missing-row policies, position encodings and batchings."""

import inspect
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import REPO, load_default_config
from embinit.workflow import extensions
from embinit.workflow.checks import check
from embinit.workflow.config import ConfigError
from conftest import isolated
from embinit.workflow.extensions import ExtensionError, load, module_name
from embinit.identity.fingerprints import code_fingerprint
from embinit.layers import initializers as ini
from embinit.layers.missing import MISSING_POLICIES
from embinit.models.position import POSITION_ENCODINGS
from embinit.registry import BATCHINGS

EXAMPLE = REPO / "examples" / "scaled_xavier.py"
SHAPE = (300, 20)


@pytest.fixture(autouse=True)
def clean():
    """Every test leaves the registries and the loaded extensions as it found them."""
    builtins = {kind: list(registry) for kind, registry in extensions.registries().items()}
    with isolated():
        yield
    assert {kind: list(registry) for kind, registry in extensions.registries().items()} == builtins
    assert not [m for m in sys.modules if m.startswith(extensions.MODULE_PREFIX)]


def write(path, text: str):
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


INITIALIZER = """
from pathlib import Path

import numpy as np

from embinit.layers.initializers import register

with open(Path(__file__).with_suffix(".runs"), "a") as log:  # one line per execution of this file
    log.write("run\\n")


@register("{name}")
def constant(pretrained, shape, rng, value: float = 1.0):
    return np.full(shape, value, dtype=np.float32)
"""

EVERY_REGISTRY = """
import numpy as np

from embinit.layers.initializers import register
from embinit.layers.missing import register_missing
from embinit.models.position import PositionEncoding, register as register_position
from embinit.training.batching import register_batching, sorted_batches


@register("Ones_Ext")
def ones(pretrained, shape, rng):
    return np.ones(shape, dtype=np.float32)


@register_missing("ones_ext")
def ones_missing(ctx, value: float = 1.0):
    return np.full((ctx.n_missing, ctx.shape[1]), value)


@register_position("none_ext")
class NoneExt(PositionEncoding):
    pass  # no position information: every hook keeps its default


@register_batching("sorted_ext")
def sorted_ext(lengths, batch_size, bucket_width, generator):
    return sorted_batches(lengths, batch_size)  # every epoch the same batches, shortest first
"""


def test_load_registers_once_and_is_idempotent(tmp_path, monkeypatch):
    path = write(tmp_path / "my_init.py", INITIALIZER.format(name="Constant_Ext"))
    (module,) = load([path])
    assert module.__name__ == module_name(path)
    assert re.fullmatch(r"embinit_ext_my_init_[0-9a-f]{8}", module.__name__)
    assert ini.INITIALIZERS["Constant_Ext"] is module.constant
    monkeypatch.chdir(tmp_path)
    assert load(["my_init.py", str(path)]) == [module, module]  # relative to the working directory, or absolute
    assert (tmp_path / "my_init.runs").read_text() == "run\n"  # executed once
    x = ini.initialize("Constant_Ext", np.zeros((4, 3), np.float32), (4, 3), seed=0, params={"value": 2.0})
    assert (x == 2).all()


def test_every_registry(tmp_path):
    load([write(tmp_path / "every.py", EVERY_REGISTRY)])
    assert "Ones_Ext" in ini.INITIALIZERS and "ones_ext" in MISSING_POLICIES and "none_ext" in POSITION_ENCODINGS
    assert "sorted_ext" in BATCHINGS


CLASH = "from embinit.models.position import register\nregister('sinusoidal')(object)\n"
LOADED = """
import sys
from embinit.workflow.extensions import ExtensionError, load
from embinit.registry import POSITION_ENCODINGS
for path in sys.argv[1:]:
    try:
        load([path])
    except ExtensionError as error:
        print(error)
print(*(POSITION_ENCODINGS.lookup(name).__name__ for name in POSITION_ENCODINGS))
"""


@pytest.mark.parametrize("files", [["every"], ["clash", "every"]])
def test_extensions_loaded_before_the_position_encodings_module(tmp_path, files):
    """As the workflow parses: the built-in encodings are their Sources, which importing embinit.models.position (as a
    file registering an encoding does) turns into their classes, not a clash; a file registering a built-in's name is
    refused all the same, and the registry it leaves gives every class."""
    paths = {"every": write(tmp_path / "every.py", EVERY_REGISTRY), "clash": write(tmp_path / "clash.py", CLASH)}
    out = subprocess.run(
        [sys.executable, "-c", LOADED, *(str(paths[f]) for f in files)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.splitlines()
    refused = f"extension {paths['clash']}: position encoding 'sinusoidal' is already registered (built in); choose"
    assert [line.startswith(refused) for line in out[:-1]] == [True] * (len(files) - 1)
    assert out[-1] == "Sinusoidal Learned NoPosition Rotary RelativeBias NoneExt"


def test_same_stem_in_two_folders_are_two_modules(tmp_path):
    a = write((tmp_path / "a").mkdir() or tmp_path / "a" / "ext.py", INITIALIZER.format(name="From_A"))
    b = write((tmp_path / "b").mkdir() or tmp_path / "b" / "ext.py", INITIALIZER.format(name="From_B"))
    mod_a, mod_b = load([a, b])
    assert mod_a is not mod_b and {"From_A", "From_B"} <= set(ini.INITIALIZERS)


@pytest.mark.parametrize(
    "text, kind, name",
    [
        (
            "from embinit.layers.initializers import register\nregister('Xavier')(lambda p, s, r: p)\n",
            "initializer",
            "Xavier",
        ),
        (
            "from embinit.layers.missing import register_missing\nregister_missing('zeros')(lambda ctx: 0)\n",
            "missing-row policy",
            "zeros",
        ),
        (
            "from embinit.models.position import register\nregister('sinusoidal')(object)\n",
            "position encoding",
            "sinusoidal",
        ),
        (
            "from embinit.training.batching import register_batching\nregister_batching('random')(list)\n",
            "batching",
            "random",
        ),
    ],
)
def test_a_builtin_name_is_refused_and_left_intact(tmp_path, text, kind, name):
    registry = extensions.registries()[kind]
    builtin = registry[name]
    path = write(tmp_path / "clash.py", text)
    with pytest.raises(
        ExtensionError,
        match=rf"^extension {re.escape(str(path))}: {kind} '{name}' is already registered \(built in\); choose another name$",
    ):
        load([path])
    assert registry[name] is builtin and module_name(path) not in sys.modules


def test_a_name_of_another_extension_is_refused(tmp_path):
    first = write(tmp_path / "first.py", INITIALIZER.format(name="Twice"))
    second = write(tmp_path / "second.py", INITIALIZER.format(name="Twice"))
    (module,) = load([first])
    with pytest.raises(
        ExtensionError,
        match=rf"second\.py: initializer 'Twice' is already registered \(by extension {re.escape(str(first))}\)",
    ):
        load([second])
    assert ini.INITIALIZERS["Twice"] is module.constant


def test_missing_file_and_not_python(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ExtensionError,
        match=rf"^extension nope\.py: no such file \(relative to the working directory {re.escape(str(tmp_path))}\)$",
    ):
        load(["nope.py"])
    with pytest.raises(ExtensionError, match=rf"^extension {re.escape(str(tmp_path))}/nope\.py: no such file$"):
        load([tmp_path / "nope.py"])
    write(tmp_path / "ext.txt", "x = 1\n")
    with pytest.raises(ExtensionError, match=r"^extension ext\.txt: not a Python file"):
        load(["ext.txt"])


def test_import_errors_name_the_file_and_line_and_undo_its_registrations(tmp_path):
    path = write(
        tmp_path / "broken.py",
        """
        from embinit.layers.initializers import register

        register("Half_Done")(lambda p, s, r: p)


        def helper():
            return 1 / 0


        helper()
        """,
    )
    with pytest.raises(
        ExtensionError, match=rf"^extension {re.escape(str(path))}, line 7: ZeroDivisionError: division by zero$"
    ):
        load([path])
    assert "Half_Done" not in ini.INITIALIZERS and module_name(path) not in sys.modules
    path = write(tmp_path / "syntax.py", "x = 1\ndef f(:\n")
    with pytest.raises(ExtensionError, match=rf"^extension {re.escape(str(path))}, line 2: SyntaxError"):
        load([path])
    path = write(tmp_path / "imports.py", "import no_such_module_xyz\n")
    with pytest.raises(
        ExtensionError, match=r"imports\.py, line 1: ModuleNotFoundError: No module named 'no_such_module_xyz'"
    ):
        load([path])


CODE = """
import numpy as np
import torch.nn as nn

from embinit.layers.initializers import register
from embinit.layers.missing import register_missing
from embinit.models.position import PositionEncoding, register as register_position

SCALE = {scale}


def helper():
    return {helper}


def unrelated():
    return {unrelated}


@register("Code_Ext")
def code_ext(pretrained, shape, rng):
    return np.full(shape, SCALE * helper(), dtype=np.float32)


@register_missing("code_ext")
def fill(rows, dim, rng):
    return np.full((len(rows), dim), helper(), dtype=np.float32)


@register_position("code_ext")
class Shifted(PositionEncoding):
    def embed(self, x, start=0):
        return x + helper()
"""


def test_a_code_fingerprint_covers_what_the_entry_runs_and_nothing_else(tmp_path):
    """An entry's fingerprint follows the helpers and constants it uses, not the rest of its file or its place."""

    def prints(name="ext.py", **edits):
        values = {"scale": 2.0, "helper": 1, "unrelated": 1} | edits
        path = write(tmp_path / name, CODE.format(**values))
        with isolated():
            load([path])
            entries = (ini.INITIALIZERS["Code_Ext"], MISSING_POLICIES["code_ext"], POSITION_ENCODINGS["code_ext"])
            return [code_fingerprint(e) for e in entries] + [ini.fingerprint("Code_Ext")]

    base = prints()
    assert all(re.fullmatch(r"[0-9a-f]{16}", p) for p in base) and len(set(base)) == 4
    assert prints(unrelated=2) == base  # another function of the same file
    assert prints(name="moved.py") == base  # the same code in another file
    assert all(a != b for a, b in zip(prints(helper=2), base))  # a helper every entry calls
    changed = prints(scale=3.0)  # a constant only the initializer reads
    assert changed[0] != base[0] and changed[1:3] == base[1:3] and changed[3] != base[3]
    built_in = [code_fingerprint(p) for p in POSITION_ENCODINGS.values()]
    assert len(set(built_in)) == len(built_in)  # each built-in encoding its own code
    ours_names = list(ini.INITIALIZERS)
    ours = [ini.fingerprint(n) for n in ours_names] + [code_fingerprint(MISSING_POLICIES["zeros"])]
    with isolated():
        load([write(tmp_path / "other.py", INITIALIZER.format(name="Other_Ext"))])  # registers a new name
        assert [ini.fingerprint(n) for n in ours_names] + [code_fingerprint(MISSING_POLICIES["zeros"])] == ours


def test_example_scaled_xavier():
    load([EXAMPLE])
    fn = ini.INITIALIZERS["Xavier_Scaled"]
    assert fn.__doc__ and "scale" in inspect.signature(fn).parameters
    assert not ini.reads_pretrained("Xavier_Scaled")  # its runs need no download: the workflow passes no matrix
    a = ini.xavier_bound(*SHAPE)
    for params, scale in (({}, 2.0), ({"scale": 3.0}, 3.0)):
        x = ini.initialize("Xavier_Scaled", None, SHAPE, seed=1, params=params)  # its own layer, not Xavier
        assert x.dtype == np.float32 and x.shape == SHAPE
        assert 0.99 * scale * a < np.abs(x).max() <= scale * a * (1 + 1e-6)
    assert len(ini.fingerprint("Xavier_Scaled", {"scale": 3.0})) == 16


def test_config_check_loads_the_example():
    config = load_default_config()
    config["initializers"] = [*config["initializers"], "Xavier_Scaled"]
    config["initializer_params"] = {**config["initializer_params"], "Xavier_Scaled": {"scale": 3.0}}
    with pytest.raises(ConfigError, match=r"config key initializers\[\d+\]: unknown name 'Xavier_Scaled'; allowed: "):
        check(config)
    config["extensions"] = [str(EXAMPLE)]
    check(config)
    assert "Xavier_Scaled" in ini.INITIALIZERS
    config["initializer_params"]["Xavier_Scaled"] = {"scale": "big"}
    with pytest.raises(
        ConfigError, match=r"config key initializer_params\.Xavier_Scaled\.scale: 'big' is not of type 'number'"
    ):
        check(config)


def test_config_check_accepts_every_registry_of_an_extension(tmp_path):
    config = load_default_config()
    config["embeddings"]["missing"] = "ones_ext"
    config["embeddings"]["missing_params"] = {"ones_ext": {"value": 0.5}}
    for variant in config["variants"].values():
        variant["pos_encoding"] = "none_ext"
    config["train"]["batching"] = "sorted_ext"
    with pytest.raises(
        ConfigError,
        match=r"config key embeddings\.missing: unknown name 'ones_ext'; allowed: focus, mean_std, neighbors",
    ):
        check(config)
    config["extensions"] = [str(write(tmp_path / "every.py", EVERY_REGISTRY))]
    check(config)
    config["embeddings"]["missing_params"] = {"ones_ext": {"valeu": 0.5}}
    with pytest.raises(
        ConfigError, match=r"embeddings\.missing_params\.ones_ext\.valeu: unknown name 'valeu'; allowed: value"
    ):
        check(config)


HELD = """
import numpy as np

from embinit.layers.initializers import register

SETTINGS = {settings}
FACTORS = [{factor}, {{"nested": {{"deep": {deep}}}}}]
NAMES = {{"alpha", "beta", "gamma", "delta"}}


@register("Held_Ext")
def held(pretrained, shape, rng):
    scale = SETTINGS["scale"] * FACTORS[0] * FACTORS[1]["nested"]["deep"] * len(NAMES)
    return np.full(shape, scale, dtype=np.float32)
"""


def test_a_code_fingerprint_covers_the_dicts_lists_and_sets_an_entry_reads(tmp_path):
    """Module-level containers are state the entry runs with (issue 58: a changed `SETTINGS` dict reran nothing);
    each nested value counts, and a set's order (hash seed) does not."""

    def held(**edits):
        values = {"settings": {"scale": 0.5}, "factor": 2, "deep": 3} | edits
        with isolated():
            load([write(tmp_path / "held.py", HELD.format(**values))])
            return ini.fingerprint("Held_Ext")

    base = held()
    assert held() == base
    assert held(settings={"scale": 4.0}) != base
    assert held(factor=5) != base
    assert held(deep=7) != base
    assert held() == base  # the file as it was: the same in another process, whatever its hash seed
    code = "import sys; from embinit.workflow.extensions import load; from embinit.layers import initializers as ini; "
    code += "load([sys.argv[1]]); print(ini.fingerprint('Held_Ext'))"
    prints = {
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "held.py")],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert prints == {base}


NUMPY_HELD = """
import threading

import numpy as np

from embinit.layers.initializers import register

GAIN = np.float32({gain})
TABLE = np.arange(4000, dtype=np.float32) * {gain}
{extra}

@register("Gain_Ext")
def gained(pretrained, shape, rng):
    return np.full(shape, GAIN * TABLE[-1]{use}, dtype=np.float32)
"""


def test_a_code_fingerprint_holds_the_numpy_values_an_entry_reads_and_refuses_what_it_cannot_hold(tmp_path):
    """A module-level numpy scalar or array the entry reads is in its fingerprint (a changed GAIN = np.float32(...)
    reruns its layers; an array's middle, which its repr elides, counts too); a value whose repr is an address cannot
    be held, so loading the file fails naming it, and the config check names the file."""

    def fingerprint(gain, extra="", use=""):
        with isolated():
            load([write(tmp_path / "gain.py", NUMPY_HELD.format(gain=gain, extra=extra, use=use))])
            return ini.fingerprint("Gain_Ext")

    base = fingerprint(1.0)
    assert fingerprint(1.0) == base and fingerprint(8.0) != base
    middle = "TABLE[2000] = 5.0"
    assert fingerprint(1.0, extra=middle) != base
    with (
        isolated(),
        pytest.raises(ExtensionError, match=r"gain\.py: initializer 'Gain_Ext': .*reads the module-level LOCK = <"),
    ):
        load(
            [
                write(
                    tmp_path / "gain.py",
                    NUMPY_HELD.format(gain=1.0, extra="LOCK = threading.Lock()", use=" * bool(LOCK)"),
                )
            ]
        )
    with isolated():
        config = load_default_config() | {"extensions": [str(tmp_path / "gain.py")]}
        with pytest.raises(ConfigError, match=r"config key extensions\[0\]: extension .*gain\.py: .*LOCK"):
            check(config)
