"""Many viewers of one dashboard server: refresh latency and server CPU per viewer.

    .venv/bin/python benchmarks/bench_viewers.py [--viewers 1,10,50] [--seconds 30] [--wall]
        [--services 10] [--minutes 60] [--range 15m] [--redis URL]

Starts its own redis-server, seeded with an hour of 10 services through the job's sink code
(tests/integration/seed.py), or reads the store at `--redis` as it is (seeding 1,000 services
takes ~12 minutes: seed once, measure the page and the wall page against it), and one
`tidegauge dashboard` process. Then, for each count, connects
that many Streamlit sessions as real websocket clients speaking Streamlit's own protocol
(`streamlit.proto`): each runs the page once, then does what a browser does for the page's
`st.fragment(run_every=...)`: whenever the server's auto-rerun interval comes round, it asks for a
rerun of the fragment. Measured per refresh: the time from the request to the server's
"fragment run finished"; apart, each viewer's first draw (its session's whole page, or its first
document: the first count's first viewer meets the fresh process's empty memo); over the
interval: the dashboard process's CPU seconds (its own and its children's, from /proc) and the
Redis commands it sent, per viewer, and this process's own CPU (the clients decode every message
the server sends: on a small machine they compete with it).
The sessions run in this process on the same machine (no browser draws anything: what is
measured is the server's work).

With `--wall`, the viewers are screens of the wall page (dashboard/wall.py) instead: each does
what the page's script does, an HTTP GET of `/tidegauge/wall.json` (with the ETag it last got)
one refresh interval after the previous answer, on a kept-alive connection; a refresh is an
answer (200 with the new document, or 304).
Prints the machine and the figures; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from cli.local.services import free_port, start_redis, wait_for_port  # noqa: E402
from tests.integration.seed import seed_live  # noqa: E402
from tests.procs import descendants  # noqa: E402
from tidegauge.core.store import Keys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DONE = {
    ForwardMsg.FINISHED_SUCCESSFULLY,
    ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY,
}


def _cpu_s(pid: int) -> float:
    """utime + stime of a process and every live descendant (the Streamlit server), seconds."""
    ticks = 0
    for p in {pid, *descendants(pid)}:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def _viewer(
    port: int, stop_at: float, measure_from: float, out: list[float], firsts: list[float]
) -> None:
    """One session: the page once (its time to `firsts`), then fragment reruns at the server's
    interval."""
    async with connect(
        f"ws://127.0.0.1:{port}/_stcore/stream",
        subprotocols=["streamlit"],  # type: ignore[list-item]
        max_size=None,
        origin=f"http://127.0.0.1:{port}",  # type: ignore[arg-type]
    ) as ws:
        first = BackMsg()
        first.rerun_script.query_string = ""
        first.rerun_script.page_script_hash = ""
        opened: float | None = time.monotonic()
        await ws.send(first.SerializeToString())
        page_hash = ""
        fragment: str | None = None
        interval = 1.0
        sent: float | None = None
        next_at = 0.0
        while time.monotonic() < stop_at:
            timeout = max(0.01, (next_at - time.monotonic()) if fragment and sent is None else 5.0)
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout)
            except TimeoutError:
                raw = None
            if raw is not None:
                msg = ForwardMsg.FromString(raw if isinstance(raw, bytes) else raw.encode())
                kind = msg.WhichOneof("type")
                if kind == "new_session":
                    page_hash = msg.new_session.page_script_hash
                elif kind == "auto_rerun":
                    fragment, interval = msg.auto_rerun.fragment_id, msg.auto_rerun.interval
                    next_at = time.monotonic() + interval
                elif kind == "script_finished" and msg.script_finished in DONE:
                    if opened is not None:
                        firsts.append(time.monotonic() - opened)
                        opened = None
                    elif sent is not None:
                        if sent >= measure_from:
                            out.append(time.monotonic() - sent)
                        sent = None
                        next_at = max(next_at, time.monotonic())
            if fragment and sent is None and time.monotonic() >= next_at:
                req = BackMsg()
                req.rerun_script.page_script_hash = page_hash
                req.rerun_script.fragment_id = fragment
                req.rerun_script.is_auto_rerun = True
                sent = time.monotonic()
                next_at = sent + interval
                await ws.send(req.SerializeToString())


def _screen(
    port: int, stop_at: float, measure_from: float, out: list[float], firsts: list[float]
) -> None:
    """One wall screen: GET the document, wait the interval after each answer, again."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    etag = None
    firsts_done = False
    while time.monotonic() < stop_at:
        sent = time.monotonic()
        conn.request("GET", "/tidegauge/wall.json", headers={"If-None-Match": etag} if etag else {})
        resp = conn.getresponse()
        resp.read()
        if resp.status not in (200, 304):
            raise RuntimeError(f"wall.json answered {resp.status}")
        etag = resp.getheader("ETag", etag)
        if not firsts_done:
            firsts.append(time.monotonic() - sent)
            firsts_done = True
        elif sent >= measure_from:
            out.append(time.monotonic() - sent)
        time.sleep(1.0)  # the page's script: the next poll one refresh (1 s) after the answer
    conn.close()


def _run_wall(
    port: int, n: int, warmup_s: float, seconds: float, firsts: list[float]
) -> list[float]:
    start = time.monotonic()
    out: list[float] = []
    threads = [
        threading.Thread(
            target=_screen,
            args=(port, start + warmup_s + seconds, start + warmup_s, out, firsts),
        )
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


async def _run(
    port: int, n: int, warmup_s: float, seconds: float, firsts: list[float]
) -> list[float]:
    start = time.monotonic()
    out: list[float] = []
    await asyncio.gather(
        *(
            _viewer(port, start + warmup_s + seconds, start + warmup_s, out, firsts)
            for _ in range(n)
        )
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--viewers", default="1,10,50")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--services", type=int, default=10)
    p.add_argument("--minutes", type=int, default=60)
    p.add_argument("--wall", action="store_true", help="screens of the wall page, not sessions")
    p.add_argument("--range", default="15m", help="the page's time range (--window-range)")
    p.add_argument(
        "--redis",
        help="read this store as it is (no redis-server started, nothing seeded; e.g. one "
        "`seed_live` filled before)",
    )
    args = p.parse_args()
    print(describe(("redis", "streamlit", "websockets", "plotly")))
    svc = None if args.redis else start_redis()
    port = free_port()
    url = args.redis or f"redis://{svc.address}/0"  # type: ignore[union-attr]
    dash = None
    try:
        r = redis.Redis.from_url(url)
        stored = f"the store at {url}: {r.scard(Keys().services)} services"
        if svc is not None:
            seed_live(
                r,
                Keys(),
                time.time_ns() // 1_000_000,
                services=args.services,
                minutes=args.minutes,
            )
            stored = f"seeded {args.services} services x {args.minutes} min"
        dash = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "dashboard", "--redis", url]
            + ["--port", str(port), "--address", "127.0.0.1", "--window-range", args.range],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port("127.0.0.1", port, timeout_s=60, proc=dash)
        urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=30).read()
        print(f"{stored}; dashboard on port {port}, showing {args.range}")
        for n in [int(x) for x in args.viewers.split(",")]:
            cpu0, cmd0, t0, mine0 = None, None, None, 0.0

            firsts: list[float] = []

            async def measured(n: int = n, firsts: list[float] = firsts) -> list[float]:
                nonlocal cpu0, cmd0, t0, mine0
                task = asyncio.ensure_future(
                    asyncio.to_thread(_run_wall, port, n, args.warmup, args.seconds, firsts)
                    if args.wall
                    else _run(port, n, args.warmup, args.seconds, firsts)
                )
                await asyncio.sleep(args.warmup)
                assert dash is not None
                cpu0, t0, mine0 = _cpu_s(dash.pid), time.monotonic(), time.process_time()
                cmd0 = int(r.info("stats")["total_commands_processed"])
                return await task

            lat = asyncio.run(measured())
            assert dash is not None and cpu0 is not None and t0 is not None and cmd0 is not None
            span = time.monotonic() - t0
            cpu = _cpu_s(dash.pid) - cpu0
            mine = time.process_time() - mine0
            cmds = int(r.info("stats")["total_commands_processed"]) - cmd0
            lat.sort()
            if not lat:
                print(f"{n} viewers: no refresh finished")
                continue
            print(
                f"{n:>3} viewers: {len(lat):,} refreshes in {span:.0f}s ({len(lat) / span / n:.2f} "
                f"per viewer per s); refresh latency median {1000 * statistics.median(lat):.0f} "
                f"ms, p95 {1000 * lat[int(0.95 * (len(lat) - 1))]:.0f} ms; server CPU "
                f"{cpu / span:.2f} cores ({1000 * cpu / span / n:.0f} ms per viewer per s); "
                f"Redis commands {cmds / span:,.0f}/s; the clients' own CPU "
                f"{mine / span:.2f} cores; first draws {_span_ms(firsts)}"
            )
    finally:
        if dash is not None:
            dash.terminate()
            dash.wait(10)
        if svc is not None:
            svc.stop()


def _span_ms(values: list[float]) -> str:
    """ "1,234 ms" or "980–1,234 ms" (the first of them met the process's empty memo)."""
    if not values:
        return "none finished"
    lo, hi = 1000 * min(values), 1000 * max(values)
    return f"{hi:,.0f} ms" if len(values) == 1 else f"{lo:,.0f}–{hi:,.0f} ms"


if __name__ == "__main__":
    main()
