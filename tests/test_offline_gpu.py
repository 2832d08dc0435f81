"""tools/offline_gpu.py: the records a GPU machine packed come back into the results directory as the train rule wrote them,
and the run script trains only through the rules that need no download."""

import importlib.util
import io
import subprocess
import tarfile
from types import SimpleNamespace

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("offline_gpu", REPO / "tools" / "offline_gpu.py")
gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu)


def test_collect_unpacks_only_run_files_under_results(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "REPO", tmp_path)
    packed = tmp_path / "records.tgz"
    with tarfile.open(packed, "w:gz") as tar:
        for name, text in [("results/set/b/Xavier/seed0/base/final.json", "{}"), ("../outside.txt", "no"),
                           ("results/set/b/Xavier/seed0/base/metrics.parquet", "x")]:  # fmt: skip
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    gpu.collect(SimpleNamespace(records=packed))
    assert (tmp_path / "results/set/b/Xavier/seed0/base/final.json").read_text() == "{}"
    assert (tmp_path / "results/set/b/Xavier/seed0/base/metrics.parquet").is_file()
    assert not (tmp_path.parent / "outside.txt").exists()


def test_the_run_script_allows_only_layer_and_train_rules_and_packs_the_blocks_records():
    text = gpu.RUN_SH.format(rules=" ".join(gpu.RULES), args="-- t", results="results/s/b", gpu_jobs=8,
                               script="run2.sh", stem="run2", time_limit=500, bench="")  # fmt: skip
    assert "--allowed-rules initialize_embedding train pack -- t" in text and "--profile profiles/local-gpu" in text
    assert "find results/s/b -path '*/seed*/*'" in text and '"$out/records-run2.tgz"' in text
    assert (
        "-newer .offline-gpu/run2.sh" in text
        and 'timeout --kill-after=30 "${GPU_TIME_LIMIT:-500}" python3 -m snakemake' in text
    )
    assert "stacked_step.py" not in text
    # --bench: the stacked step timed on the GPU first, its figures beside the records
    benched = gpu.RUN_SH.format(rules="train", args="-- t", results="r", gpu_jobs=2, script="s.sh", stem="s",
                                  time_limit=400, bench=gpu.BENCH)  # fmt: skip
    assert benched.index("bench/stacked_step.py --device cuda") < benched.index("python3 -m snakemake")
    assert '--json "$out/stacked.json"' in benched and benched.index("out=${OUT:-.}") < benched.index("stacked_step")
    blocks = gpu.block_dirs(
        "config/paper-scale-cpu.yaml", ["results/paper-scale-cpu/multi30k_xavier300/Xavier/seed0/base/final.json"]
    )
    assert blocks == ["results/paper-scale-cpu/multi30k_xavier300"]
    # --stack 16: one block's runs sixteen to a stacked process (config cluster.stack); 0: each run its own job
    assert gpu.snakemake_args("c.yaml", None, ["t"], 16) == [
        "--configfile", "c.yaml", "--config", "cluster={pack: 16, stack: true}", "--", "t"
    ]  # fmt: skip
    assert gpu.snakemake_args("c.yaml", "m", ["t"]) == ["--configfile", "c.yaml", "--config", "mirror=m", "--", "t"]
    with pytest.raises(ValueError):  # a target outside the result set's directory
        gpu.block_dirs("config/paper-scale-cpu.yaml", ["results/other/b/X/seed0/base/final.json"])


def test_the_carry_takes_a_blocks_pretrained_matrices_not_its_layers_and_stops_over_the_devices_limits(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(gpu, "REPO", tmp_path)
    block = tmp_path / "results/set/b"
    (block / "Xavier/seed0").mkdir(parents=True)
    for name in ("pretrained_decoder.npy", "pretrained_decoder.parquet", "Xavier/seed0/embedding_decoder.npy"):
        (block / name).write_bytes(b"x" * 1000)
    files = gpu.pretrained_files(["results/set/b"])
    assert files == ["results/set/b/pretrained_decoder.npy", "results/set/b/pretrained_decoder.parquet"]
    assert gpu.carry_problem(files, gpu.carried(files)) is None
    monkeypatch.setattr(gpu, "CARRY_BYTES", 1500)
    problem = gpu.carry_problem(files, gpu.carried(files))
    assert "MiB to carry beside the checkout's" in problem and "pretrained_decoder.npy" in problem
    # the tracked files travel too: a carry that fits alone can be over the limit beside them
    monkeypatch.setattr(gpu, "CARRY_BYTES", 2500)
    assert gpu.carry_problem(files, gpu.carried(files)) is None
    assert "beside the checkout's" in gpu.carry_problem(files, gpu.carried(files), tracked=1000)
    nine = [*files, *files, *files, *files, files[0]]
    assert "9 paths to carry" in gpu.carry_problem(nine, gpu.carried(nine))


def test_a_detached_lease_starts_in_a_copy_returns_at_once_and_a_second_call_collects_its_records(tmp_path):
    checkout, out1, out2 = tmp_path / "checkout", tmp_path / "out1", tmp_path / "out2"
    for folder in (checkout / ".offline-gpu", out1, out2):
        folder.mkdir(parents=True)
    (checkout / ".offline-gpu/detach.sh").write_text(gpu.DETACH_SH.format())
    # a run script as prepare writes one: it runs where it lies, under GPU_TIME_LIMIT, and packs into $OUT
    (checkout / ".offline-gpu/run.sh").write_text(
        'cd "$(dirname "$0")/.."; echo "limit $GPU_TIME_LIMIT in $PWD"; sleep 2; echo 1 run records packed\n'
        'touch "$OUT/records-run.tgz"\n'
    )
    env = {"PATH": "/usr/bin:/bin", "GPU_STATE": str(tmp_path / "state"), "GPU_WORK": str(tmp_path / "work")}

    def call(out, *args):
        return subprocess.run(["bash", str(checkout / ".offline-gpu/detach.sh"), *args], env={**env, "OUT": str(out)},
                              capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip

    first = call(out1, "start", "run.sh", "100", "0")
    assert "offline-gpu: still running" in first and not (out1 / "records-run.tgz").exists()
    second = call(out2, "collect", "30")
    assert "offline-gpu: ended, exit 0" in second and "1 run records packed" in second
    assert (out2 / "records-run.tgz").is_file()
    assert f"limit 55 in {tmp_path / 'work'}" in (out2 / "run.log").read_text()  # the deadline less the packing's 45 s
    with pytest.raises(subprocess.CalledProcessError):
        call(out2, "stop")


def test_only_the_data_folders_of_the_targets_tasks_travel(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "REPO", tmp_path)
    (tmp_path / "config.yaml").write_text("blocks: {b1: {task: sst2}}\n")
    # the set's b1 sets its seeds alone: its task is config.yaml's
    (tmp_path / "set.yaml").write_text("results_dir: results/set\nblocks: {b1: {seeds: 2}, b2: {task: multi30k}}\n")
    for folder in ("data/vocab/multi30k", "data/tokenized/multi30k", "data/references/multi30k", "data/vocab/sst2",
                   "data/tokenized/sst2"):  # fmt: skip
        (tmp_path / folder).mkdir(parents=True)
    assert gpu.data_dirs("set.yaml", ["results/set/b2"]) == [
        "data/vocab/multi30k", "data/tokenized/multi30k", "data/references/multi30k"
    ]  # fmt: skip
    assert gpu.data_dirs("set.yaml", ["results/set/b1"]) == ["data/vocab/sst2", "data/tokenized/sst2"]
