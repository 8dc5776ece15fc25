"""Kafka's compression codecs: their names, their wire ids, and the library each one needs.

A Kafka record batch says in its attributes how its records are compressed (Kafka's protocol
spec: bits 0-2, 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd). kafka-python decodes gzip with the
standard library and the others only with an extra package each; those packages are
dependencies of Tidegauge (pyproject.toml), so a normal install reads every codec. This table is
the one place that knows which package serves which codec, for the producer's `--compression`
check and for the source's error when a batch cannot be decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CODECS", "Codec", "codec_by_id", "codec_by_name", "missing_library"]


@dataclass(frozen=True)
class Codec:
    """One compression codec: `name` as in `compression.type`, `wire_id` in a batch's attributes.

    `package` is what `pip install` takes, `module` what Python imports (None: the standard
    library is enough).
    """

    name: str
    wire_id: int
    package: str | None
    module: str | None


CODECS: tuple[Codec, ...] = (
    Codec("none", 0, None, None),
    Codec("gzip", 1, None, None),
    # kafka-python imports `snappy` (python-snappy, which runs on cramjam).
    Codec("snappy", 2, "python-snappy", "snappy"),
    Codec("lz4", 3, "lz4", "lz4.frame"),
    Codec("zstd", 4, "zstandard", "zstandard"),
)


def codec_by_name(name: str) -> Codec:
    """The codec called `name` (`none`, `gzip`, `snappy`, `lz4`, `zstd`); ValueError otherwise."""
    for codec in CODECS:
        if codec.name == name:
            return codec
    raise ValueError(
        f"unknown compression {name!r}; choose one of {', '.join(c.name for c in CODECS)}"
    )


def codec_by_id(wire_id: int) -> Codec | None:
    """The codec with attribute bits `wire_id`, or None for an id Kafka has not defined."""
    for codec in CODECS:
        if codec.wire_id == wire_id:
            return codec
    return None


def missing_library(codec: Codec) -> str | None:
    """Why this Python cannot use `codec`, as an install instruction; None when it can.

    Asks kafka-python's own codec module, so the answer is what its encoder and decoder will do,
    not what an import here happens to find.
    """
    from kafka import codec as kafka_codec

    available = {
        "none": True,
        "gzip": kafka_codec.has_gzip(),
        "snappy": kafka_codec.has_snappy(),
        "lz4": kafka_codec.has_lz4(),
        "zstd": kafka_codec.has_zstd(),
    }[codec.name]
    if available:
        return None
    return (
        f"the {codec.name} library is not installed in this Python; install it with "
        f"`pip install {codec.package}` (a dependency of tidegauge: `make setup` installs it)"
    )
