"""Code in a run's identity: an edit of the training code plans the runs it made again, naming "training code", unless
the result set accepts the old code's digest (config accepted_training_code) through a committed proof that the
workflow checks itself (tools/prove_training_code.py writes one)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ONE_RUN, REPO, one_run_config, snakemake_command
from embinit.identity.proofs import prove

# What the workflow runs: the Snakefile and everything it and its jobs import or read
CODE = ["Snakefile", "rules", "embinit", "workflow_scripts", "config.yaml", "schemas", "resources", "envs", "report"]


def _snakemake(code, workdir, *args):
    """snakemake on the workflow copy `code` for the grid's run, its jobs and main process importing that copy's
    embinit."""
    command = snakemake_command(workdir, code)
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [*command, f"{ONE_RUN}/final.json", *args], capture_output=True, text=True, env=env, cwd=workdir, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_an_edit_of_the_training_code_reruns_its_runs_unless_the_old_code_is_accepted(
    tmp_path, one_run_grid, shared_mirror
):
    code = tmp_path / "code"
    code.mkdir()
    for name in CODE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, code / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, code / name)
    workdir = shutil.copytree(one_run_grid, tmp_path / "grid")
    cfg = workdir / "c.yaml"
    assert "Nothing to be done" in _snakemake(code, workdir, "-n", "--configfile", str(cfg)).stdout

    record = workdir / ONE_RUN / "final.json"
    old = json.loads(record.read_text())["training_code"]
    layers = code / "embinit" / "models" / "layers.py"  # the model's code
    text = layers.read_text()
    # words alone (a comment, a docstring) change nothing a run computes: nothing to plan
    layers.write_text(text.replace("class ", "# a comment\nclass ", 1).replace('"""', '"""Reworded. ', 1))
    assert "Nothing to be done" in _snakemake(code, workdir, "-n", "--configfile", str(cfg)).stdout
    layers.write_text(text.replace("class ", "EDITED = 1\n\n\nclass ", 1))  # code: the run is stale
    dry = _snakemake(code, workdir, "-n", "--configfile", str(cfg))
    assert f"{ONE_RUN}/final.json was made by training code {old[:8]}" in dry.stderr
    assert "accepted_training_code does not list" in dry.stderr and "rule train:" in dry.stdout

    accepted = one_run_config(cfg, shared_mirror, accepted_training_code=[old[:8]])
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONHASHSEED": "0"}
    refused = subprocess.run([*snakemake_command(workdir, code), f"{ONE_RUN}/final.json", "-n", "--configfile",
                              str(accepted)], capture_output=True, text=True, env=env, cwd=workdir, timeout=600)  # fmt: skip
    assert refused.returncode != 0 and "rule train:" not in refused.stdout
    said = refused.stdout + refused.stderr
    assert f"accepted_training_code[0]: no committed proof leads from training code {old[:8]}" in said
    # the proof tools/prove_training_code.py would write (an unused constant changes no number): the workflow then accepts
    current = subprocess.run([sys.executable, "-c", "from embinit.identity.training_code import code_digest as c; print(c())"],
                             capture_output=True, text=True, env=env, cwd=code, check=True).stdout.strip()  # fmt: skip
    retrained = shutil.copytree(record.parent, tmp_path / "retrained")
    (retrained / "final.json").write_text(json.dumps(json.loads(record.read_text()) | {"training_code": current}))
    prove(record.parent, retrained, str(record), None, code / "resources" / "code_proofs")
    assert "Nothing to be done" in _snakemake(code, workdir, "-n", "--configfile", str(accepted)).stdout

    cfg = one_run_config(cfg, shared_mirror)  # not accepted: the run trains again under the edited code
    _snakemake(code, workdir, "--cores", "1", "--configfile", str(cfg))
    now = json.loads(record.read_text())["training_code"]
    assert now != old and "Nothing to be done" in _snakemake(code, workdir, "-n", "--configfile", str(cfg)).stdout


def test_a_digest_accepted_without_a_proof_stops_the_config_check():
    """The config check, before any job, refuses an accepted digest no committed proof leads from, naming its key;
    the result sets' own accepted digests pass it (their proofs hold)."""
    from embinit.workflow.checks import ConfigError, check
    from conftest import result_set_config
    from test_config import _config

    with pytest.raises(
        ConfigError, match=r"accepted_training_code\[1\]: no committed proof leads from training code 0"
    ):
        check(_config({"accepted_training_code": ["31396a5c", "0123abcd"]}))
    for result_set in ("offline-cpu", "paper-scale-cpu"):
        check(result_set_config(result_set, {"mirror": None}))
