"""TLS for tests: a CA and a server certificate, and a TLS-terminating TCP proxy process.

`make_certificates` signs a certificate for 127.0.0.1 with a fresh CA (openssl); `python -m
tests.tls_proxy` runs the proxy.

The test broker (Tansu 0.6.0) accepts `--cert` but never completes a TLS handshake, so the Kafka
TLS test puts this in front of it: clients speak TLS to the proxy, the proxy speaks plain TCP to
the broker, and the broker advertises the proxy's address, so every connection a client opens
after bootstrapping goes through TLS too. A client without TLS gets nothing back.

    python -m tests.tls_proxy --listen 9093 --to 9092 --cert server.crt --key server.key
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def make_certificates(d: Path) -> Certificates:
    """A CA (`ca.crt`) and a certificate for 127.0.0.1 signed by it, in `d`."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is missing: run `make setup`"

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=d)

    run(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca"),
        *("-keyout", "ca.key", "-out", "ca.crt"),
    )
    run(
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1"),
        *("-keyout", "server.key", "-out", "server.csr"),
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        *("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt"),
    )
    return Certificates(d / "ca.crt", d / "server.crt", d / "server.key")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _serve(listen: int, to: int, context: ssl.SSLContext) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", to)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, broker_w), _pipe(broker_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, ssl=context)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--to", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    args = p.parse_args()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert, args.key)
    asyncio.run(_serve(args.listen, args.to, context))


if __name__ == "__main__":
    main()
