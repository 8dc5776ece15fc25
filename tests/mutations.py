"""Mutated records: the corpus both of the parser's decoders are held to (tests/unit).

Tokens that JSON decoders are known to disagree on (big integers, NaN, surrogates, deep nesting,
byte-order marks...), and mutations that put them into real records: cut short, a token or a
random byte inserted, a field's value replaced, a duplicate key appended, wrapped in a list.
"""

from __future__ import annotations

import random
import re

__all__ = ["FIELDS", "TOKENS", "mutations"]

TOKENS = [
    b"18446744073709551616",  # 2^64: an integer orjson turns into a float
    b"-9223372036854775809",
    b"9223372036854775807",
    b"1e400",
    b"-1e400",
    b"NaN",
    b"Infinity",
    b"-0",
    b"-0.0",
    b"0.1000000000000000055511151231257827",
    b"2.2250738585072011e-308",
    b"1.7e12",
    b"true",
    b"null",
    b'"\\ud800"',
    b'"\\u00e9\\u0000"',
    b'"2026-11-23T10:00:00+01:00"',
    b"[" * 70 + b"]" * 70,
    b"[" * 1010 + b"]" * 1010,  # too deep for the standard library, not for orjson
    b"[" * 40 + b"1" + b"]" * 40,
    b'{"a":' * 30 + b"1" + b"}" * 30,
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xed\xa0\x80",  # a surrogate in UTF-8 (CESU), not UTF-8
    b" \t\r\n",
    b"",
    # where Arrow's JSON decoder (jobs/parse/bulk.py) could part from Python's
    b"Inf",
    b"-Inf",
    b"-NaN",
    b"1e309",
    b"200.0",
    b"1E2",
    b"-0e5",
    b"0.1e1",
    b'"\\u0041"',
    b'"a\\tb\\"\\/"',
    b'"\t"',
    b'"\x7f"',
    b'"}{"',
    b'1}{"a":1',
    b"{}",
    b"[]",
]
FIELDS = [b"event_id", b"event_time", b"service", b"user_id", b"latency_ms", b"status"]
FIELDS += [b"sent_time", b"heartbeat", b"partition", b"source", b"unknown"]


def mutations(rng: random.Random, value: bytes) -> list[bytes]:
    """`value` and six mutations of it, drawn with `rng`."""
    out = [value, value[: rng.randrange(len(value) + 1)]]
    i = rng.randrange(len(value) + 1)
    out.append(value[:i] + rng.choice(TOKENS) + value[i:])
    out.append(value[:i] + bytes([rng.randrange(256)]) + value[i + 1 :])
    field, token = rng.choice(FIELDS), rng.choice(TOKENS)
    new = b'"' + field + b'":' + token
    out.append(re.sub(rb'"' + field + rb'":[^,}]*', lambda _: new, value))
    out.append(value[:-1] + b',"' + field + b'":' + token + b"}")  # a duplicate or new key
    out.append(b"[" + value + b"]")
    return out
