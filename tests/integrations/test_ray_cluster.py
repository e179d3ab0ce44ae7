"""The Ray engine on real parts, all on 127.0.0.1: a two-node Ray cluster (``ray start --head`` plus a second
``ray start --address`` with its own resources, both started and stopped here) whose workers get packwise only
through ``runtime_env``, and an S3-compatible store (moto's server) for ``s3://`` input and output."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

import packwise  # noqa: E402
from tests.integrations.test_ray import local_output, same_files  # noqa: E402

pytestmark = pytest.mark.slow
RAY = str(Path(sys.executable).with_name("ray"))


def _rows(n=600):
    return [{"input_ids": [(7 * i + j) % 900 + 1 for j in range(1 + (37 * i) % 60)]} for i in range(n)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster():
    """Head (1 CPU) + a second node (1 CPU, resource ``second_node``), each a ``ray start --block`` process in
    its own session, stopped by signalling those process groups only (never ``ray stop``, which stops every
    Ray on the machine). The nodes' environment lacks this checkout's ``src``: workers import packwise only
    from the ``runtime_env`` the test passes."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env |= {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    port, tmp = _free_port(), tempfile.mkdtemp(prefix="pwray")
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    procs = []

    def start(*args):
        p = subprocess.Popen([RAY, "start", *args, *common], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        procs.append(p)

    try:
        start("--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={tmp}")
        deadline = time.time() + 60
        while time.time() < deadline:  # the second node joins once the head's GCS listens
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        start(f"--address=127.0.0.1:{port}", '--resources={"second_node": 1}')
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def s3():
    """moto's S3 server on 127.0.0.1 (a free port); yields ``(pyarrow S3FileSystem, URI query)``."""
    moto_server = pytest.importorskip("moto.server")
    import pyarrow.fs as pafs

    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)  # pyarrow reads credentials from the environment, in the driver and the workers
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    fs = pafs.S3FileSystem(
        endpoint_override=f"http://{host}:{port}", access_key="testing", secret_key="testing",
        region="us-east-1", allow_bucket_creation=True,
    )  # fmt: skip
    fs.create_dir("bkt")
    try:
        yield fs, f"?endpoint_override={host}:{port}&scheme=http&region=us-east-1"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_two_node_cluster_with_runtime_env(cluster, tmp_path):
    from packwise.integrations.ray import pack_ray

    rows = _rows()
    path = tmp_path / "tok.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=100)
    options = {"capacity": 128, "packs_per_shard": 40}
    env = {"py_modules": [str(Path(packwise.__file__).parent)]}
    ray.init(address=cluster, runtime_env=env, log_to_driver=False)  # pack_ray uses this session
    deadline = time.time() + 60
    while sum(n["Alive"] for n in ray.nodes()) < 2 and time.time() < deadline:
        time.sleep(0.5)

    @ray.remote(num_cpus=1)
    def where():
        import packwise.plan

        time.sleep(0.5)
        return ray.get_runtime_context().get_node_id(), hasattr(packwise.plan, "plan_histogram")

    # both nodes run tasks, with this checkout's packwise (shipped by runtime_env, not installed on the nodes)
    seen = ray.get([where.remote() for _ in range(6)])
    assert len({node for node, _ in seen}) == 2 and all(ok for _, ok in seen)
    assert ray.get(where.options(resources={"second_node": 1}).remote())[1]
    report = pack_ray(path, tmp_path / "ray", **options)
    local = local_output(path, tmp_path / "local", **options)
    assert report.plan_hash == local.plan_hash and report.packs == local.packs > 40
    same_files(tmp_path / "ray", tmp_path / "local")  # every byte, metadata.json included
    with pytest.raises(ValueError, match="runtime_env applies to the Ray session pack_ray starts"):
        pack_ray(path, tmp_path / "again", runtime_env=env, **options)
    ray.shutdown()


def test_s3_input_and_output(s3, tmp_path, monkeypatch):
    from packwise.integrations.ray import pack_ray

    fs, query = s3
    rows = _rows()
    table = pa.Table.from_pylist(rows)
    pq.write_table(table.slice(0, 350), "bkt/in/a.parquet", filesystem=fs, row_group_size=100)
    pq.write_table(table.slice(350), "bkt/in/b.parquet", filesystem=fs)
    with fs.open_output_stream("bkt/in.jsonl") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    options = {"capacity": 128, "packs_per_shard": 40}
    local = local_output(rows, tmp_path / "local", **options)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        report = pack_ray(f"s3://bkt/in{query}", f"s3://bkt/out{query}", **options)
        assert report.input == "s3://bkt/in" and report.plan_hash == local.plan_hash
        fs.copy_file("bkt/out/metadata.json", "bkt/out-meta.json")
        got = tmp_path / "got"
        got.mkdir()
        from pyarrow.fs import FileSelector

        names = sorted(i.base_name for i in fs.get_file_info(FileSelector("bkt/out")))
        local_names = sorted(p.name for p in (tmp_path / "local").iterdir() if not p.name.startswith(".packwise"))
        assert names == local_names  # no temporary prefix left (the local lock and manifest are not data files)
        for name in names:
            (got / name).write_bytes(fs.open_input_file(f"bkt/out/{name}").read())
        same_files(  # metadata: input name and fingerprint differ
            got, tmp_path / "local", metadata=False, local_only=(".packwise.lock", ".packwise-manifest.json")
        )
        meta, want = (
            json.loads((got / "metadata.json").read_text()),
            json.loads((tmp_path / "local" / "metadata.json").read_text()),
        )
        for key in ("input", "input_fingerprint"):
            meta.pop(key), want.pop(key)
        assert meta == want
        again = pack_ray(f"s3://bkt/in.jsonl{query}", tmp_path / "from-jsonl", **options)  # s3 JSONL -> local
        assert again.plan_hash == local.plan_hash
        with pytest.raises(ValueError, match="s3://bkt/out: it is not empty"):
            pack_ray(f"s3://bkt/in{query}", f"s3://bkt/out{query}", **options)
        with pytest.raises(ValueError, match="input s3://bkt/nothing does not exist"):
            pack_ray(f"s3://bkt/nothing{query}", f"s3://bkt/out2{query}", **options)
        # a save_to_disk folder on s3
        with fs.open_output_stream("bkt/hf/data-00000-of-00001.arrow") as f, pa.ipc.new_stream(f, table.schema) as w:
            w.write_table(table)
        for listed, message in (
            (["data-00000-of-00001.arrow"] * 2, "lists 'data-00000-of-00001.arrow' more than once"),
            (["../in/a.parquet"], "which is outside the dataset folder"),
            (["data-00000-of-00002.arrow"], "data-00001-of-00002.arrow missing (1 of 2 shards"),
        ):
            with fs.open_output_stream("bkt/hf/state.json") as f:  # the local reader's checks, on s3 too
                f.write(json.dumps({"_data_files": [{"filename": n} for n in listed]}).encode())
            with pytest.raises(ValueError, match=re.escape(message)):
                pack_ray(f"s3://bkt/hf{query}", f"s3://bkt/out4{query}", format="hf", **options)
        from packwise.integrations.ray import _engine as ray_engine

        real = ray_engine._write_group

        def write_then_fail(meta, *parts):
            real(meta, *parts)  # the shard exists under the temporary prefix
            raise OSError("disk full")

        monkeypatch.setattr(ray_engine, "_write_group", write_then_fail)
        with pytest.raises(ray.exceptions.RayTaskError, match="disk full"):
            pack_ray(f"s3://bkt/in{query}", f"s3://bkt/out3{query}", **options)
        assert fs.get_file_info(FileSelector("bkt/out3", allow_not_found=True, recursive=True)) == []
    finally:
        ray.shutdown()


def test_cli_s3_input_and_output_with_runtime_env(s3, tmp_path, capsys):
    """``packwise pack s3://... -o s3://... --engine ray --runtime-env JSON``: the CLI starts Ray with the
    runtime_env, reads and writes through S3 (no report files: a note says so), and the packs are the
    local engine's."""
    from pyarrow.fs import FileSelector

    from packwise.cli import main

    fs, query = s3
    rows = _rows()
    with fs.open_output_stream("bkt/cli.jsonl") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    local = local_output(rows, tmp_path / "local", capacity=128, packs_per_shard=40)
    env = json.dumps({"env_vars": {"PACKWISE_TEST_ENV": "seen"}})
    argv = ["pack", f"s3://bkt/cli.jsonl{query}", "-o", f"s3://bkt/cli-out{query}", "--engine", "ray"]
    argv += ["--num-cpus", "2", "--capacity", "128", "--packs-per-shard", "40", "--runtime-env", env, "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    got = json.loads(captured.out)
    assert (got["plan_hash"], got["packs"], got["report_files"]) == (local.plan_hash, local.packs, [])
    assert "report files are written to a local -o only" in captured.err
    names = sorted(i.base_name for i in fs.get_file_info(FileSelector("bkt/cli-out")))
    assert names == sorted(p.name for p in (tmp_path / "local").iterdir() if p.name.startswith(("packs-", "meta")))
    for name in names:
        if name.startswith("packs-"):
            assert fs.open_input_file(f"bkt/cli-out/{name}").read() == (tmp_path / "local" / name).read_bytes()
