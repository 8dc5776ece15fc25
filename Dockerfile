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

# The whole build context (see .dockerignore): pyproject.toml and the packages tidegauge/,
# jobs/, dashboard/ and sketches/. A regular (non-editable) install copies them into
# site-packages, so the sources are removed afterwards. The dashboard's charts load plotly.js
# from dashboard/static/, copied there now: site-packages is read-only for the runtime user.
COPY . /src
RUN set -eux; \
    pip install /src; \
    rm -rf /src; \
    python -c "from dashboard.run import install_plotly_js; print(install_plotly_js())"; \
    tidegauge --help

# Run as an unprivileged user. /data is where the job keeps its Spark checkpoint; creating it
# here owned by that user makes a fresh named volume mounted on it writable.
RUN set -eux; \
    useradd --create-home --uid 10001 --shell /usr/sbin/nologin tidegauge; \
    mkdir -p /data; \
    chown tidegauge:tidegauge /data
USER tidegauge
WORKDIR /home/tidegauge
VOLUME ["/data"]

# Streamlit dashboard.
EXPOSE 8501

ENTRYPOINT ["tidegauge"]
CMD ["--help"]
