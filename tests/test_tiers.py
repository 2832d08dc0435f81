"""The fast tier (`pytest -m "not slow"`) stays fast: a test that starts snakemake must carry the slow marker."""

import pytest

from conftest import run_snakemake


def test_an_unmarked_test_that_starts_snakemake_fails_before_it_starts(tmp_path):
    with pytest.raises(pytest.fail.Exception, match="test_tiers.py::.* starts snakemake: mark it @pytest.mark.slow"):
        run_snakemake(["--version"], cwd=tmp_path)
