# syntax=docker/dockerfile:1
# One image for every Tidegauge process (topic, produce, job, query, dashboard).
#   docker build -t tidegauge:local .
#   docker run --rm tidegauge:local --help
FROM python:3.11-slim-bookworm

# PySpark 4 runs on Java 17 or 21; Debian bookworm ships 17. procps gives Spark's launch
# scripts `ps`. The stable JAVA_HOME symlink hides the architecture suffix (amd64/arm64).
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless procps; \
    rm -rf /var/lib/apt/lists/*; \
    ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17; \
    /usr/lib/jvm/java-17/bin/java -version

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    PYSPARK_PYTHON=python \
    PYSPARK_DRIVER_PYTHON=python \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The dependencies first, in a layer of their own: it is rebuilt only when pyproject.toml changes
# (a docs or code edit does not reinstall pyspark).
COPY pyproject.toml /tmp/deps/pyproject.toml
RUN set -eux; \
    python -c "import tomllib; p = tomllib.load(open('/tmp/deps/pyproject.toml', 'rb')); print('\n'.join(p['project']['dependencies']))" > /tmp/deps/requirements.txt; \
    pip install -r /tmp/deps/requirements.txt; \
    rm -rf /tmp/deps

# Then the project itself, from the build context mounted for this step only (see .dockerignore):
# a regular (non-editable) install copies the packages into site-packages, and no layer keeps
# the sources. The dashboard's charts load plotly.js from dashboard/static/, copied there now:
# site-packages is read-only for the runtime user.
RUN --mount=type=bind,target=/src,rw set -eux; \
    pip install --no-deps /src; \
    python -c "from dashboard.run import install_plotly_js; print(install_plotly_js())"; \
    tidegauge --help

# Spark's class archive (jobs/runtime/jvm_archive.py) and the SPARK_HOME linked for it
# (jobs/runtime/spark_home.py), written once here where every user can read them: each container's
# Spark then starts ~7 s sooner. A build where Java cannot write one still succeeds (slower start).
ENV TIDEGAUGE_CACHE_DIR=/opt/tidegauge/cache
RUN python -m jobs.runtime.jvm_archive_writer

# Run as an unprivileged user. /data is where the job keeps its Spark checkpoint; creating it
# here owned by that user makes a fresh named volume mounted on it writable. (No VOLUME: it
# would give every service of the image an anonymous volume of its own.)
RUN set -eux; \
    useradd --create-home --uid 10001 --shell /usr/sbin/nologin tidegauge; \
    mkdir -p /data; \
    chown tidegauge:tidegauge /data
USER tidegauge
WORKDIR /home/tidegauge

# Streamlit dashboard; Spark master (RPC, web UI) of `tidegauge cluster --role master`.
EXPOSE 8501 7077 8080

ENTRYPOINT ["tidegauge"]
CMD ["--help"]
