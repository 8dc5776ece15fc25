"""The codec table (tidegauge/core/codecs.py) against kafka-python's own codec constants."""

from __future__ import annotations

import pytest
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBase

from tidegauge.core.codecs import CODECS, codec_by_id, codec_by_name, missing_library


def test_wire_ids_are_kafkas() -> None:
    assert {c.name: c.wire_id for c in CODECS} == {
        "none": DefaultRecordBase.CODEC_NONE,
        "gzip": DefaultRecordBase.CODEC_GZIP,
        "snappy": DefaultRecordBase.CODEC_SNAPPY,
        "lz4": DefaultRecordBase.CODEC_LZ4,
        "zstd": DefaultRecordBase.CODEC_ZSTD,
    }


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_every_codec_is_installed(codec) -> None:  # type: ignore[no-untyped-def]
    # the libraries are dependencies of the project: an install without one is a broken install
    assert missing_library(codec) is None


@pytest.mark.parametrize("codec", [c for c in CODECS if c.package], ids=lambda c: c.name)
def test_a_missing_library_says_what_to_install(codec, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    attr = {"snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}[codec.name]
    monkeypatch.setattr(kafka_codec, attr, None)
    if codec.name == "lz4":
        monkeypatch.setattr(kafka_codec, "lz4f", None)
        monkeypatch.setattr(kafka_codec, "lz4framed", None)
    why = missing_library(codec)
    assert why is not None
    assert f"pip install {codec.package}" in why and codec.name in why


def test_lookups() -> None:
    assert codec_by_name("zstd").wire_id == 4
    assert codec_by_id(3) is not None and codec_by_id(3).name == "lz4"  # type: ignore[union-attr]
    assert codec_by_id(7) is None
    with pytest.raises(ValueError, match="unknown compression 'brotli'.*none, gzip"):
        codec_by_name("brotli")


def test_produce_refuses_a_codec_whose_library_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidegauge.traffic.producer import ProduceError, _compression_type

    assert _compression_type("none") is None
    assert _compression_type("zstd") == "zstd"
    monkeypatch.setattr(kafka_codec, "zstd", None)
    with pytest.raises(ProduceError, match=r"--compression zstd: .*pip install zstandard"):
        _compression_type("zstd")
