"""The parser's fast path: a chunk's ordinary records decoded at once by Arrow's JSON reader.

Judging records one at a time in Python (`tidegauge.core.events.parse_values`) costs ~5 µs per
record, the largest share of the read task (BENCHMARKS.md). Here the records that look
ordinary are joined into one newline-delimited document, decoded by Arrow's C++ JSON reader into
one column per contract field, and checked with vectorised comparisons that mirror each
`EventField`'s rules. A record this path vouches for gets exactly the values `parse_values`
would give; every other record (malformed, a heartbeat, times in other ISO-8601 spellings,
anything Arrow's decoder and Python's could disagree on) is left to `parse_values`, which stays
the one judge of what is wrong and why. `tests/unit/jobs/parse/test_bulk.py` holds the two paths
to the same rows on mutated records of every kind.

Times written as ISO-8601 text take this path in the one spelling most producers write
(JavaScript's `toISOString`; `tidegauge produce --iso-fraction`): `2026-05-28T20:26:40.020Z`,
UTC with milliseconds. Such records are decoded apart, their times as text, and turned into
epoch milliseconds by vectorised date arithmetic; a date that does not exist (February 30, hour
24, second 60) is left to Python, which words the rejection.

What makes a record a candidate (each rule closes a gap between the two decoders):
- ASCII only, no control character, no backslash: no invalid UTF-8, byte-order mark, escape or
  lone surrogate (Arrow accepts some of those; Python does not, or decodes them differently),
  and no raw newline, so a record is exactly one line of the document;
- it starts with `{` and ends with `}`, at most `MAX_CANDIDATE_BYTES` long, with no second
  bracket: not empty, not too large, no integer of 4,300 digits (which Python refuses) and no
  nested value (whose depth the contract limits);
- no `NaN`/`Inf` token anywhere (Arrow's decoder knows spellings Python's does not), no
  `heartbeat`;
- no field whose value starts with a character its type cannot start with (time, number or
  string written as something else), so the common malformed kinds never fail a decode; a
  record with a time written as text is a candidate only if none of its times is written as a
  number (such records decode apart, with times as text; a time not in the one spelling is
  left to Python after the decode).
After decoding, a negative zero in a float field is left to Python too (Python reads the
integer `-0` as 0.0, Arrow as -0.0).

A chunk whose decode fails anyway (a duplicate contract key, `1e400` as a latency, `200.0` as a
status, a record of two objects) is decoded again without the record Arrow names as failing,
or else split in halves (`_decode`); pieces of at most `_SMALLEST` records go to `parse_values`
whole.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from tidegauge.core.events import MAX_TIME_MS, MIN_TIME_MS, EventField

__all__ = ["MAX_CANDIDATE_BYTES", "Vouched", "vouch"]

#: Longer records are judged one by one: below 4,300 bytes no integer can have the 4,300 digits
#: Python's decoder refuses, and a request event is a few hundred bytes.
MAX_CANDIDATE_BYTES = 4_000

#: A failing piece of at most this many records is judged one by one instead of split again.
_SMALLEST = 32

#: Lines a chunk's decodes may take in all, in chunk sizes: a clean chunk takes one.
_RETRIES = 4

_INT32 = 2**31

#: Decoded pieces of a chunk: which of its records (positions) each table's rows are.
Piece = tuple[npt.NDArray[np.int64], pa.Table]

#: Arrow type each contract type is decoded as; int fields are range-checked, then narrowed.
_DECODED = {"string": pa.string(), "time": pa.int64(), "float": pa.float64(), "int": pa.int64()}


class Vouched:
    """What the fast path found in a chunk of n records.

    `ok` (length n) marks the records it vouches for; `rows[i]` is record i's row in `columns`
    where `ok[i]`; `columns` holds each field's values (by `EventField.column`) of the decoded
    candidates, in the field's parsed type.
    """

    __slots__ = ("columns", "ok", "rows")

    def __init__(
        self, ok: npt.NDArray[np.bool_], rows: npt.NDArray[np.int64], columns: dict[str, pa.Array]
    ) -> None:
        self.ok = ok
        self.rows = rows
        self.columns = columns


#: What no candidate may hold, anywhere: a control character (Arrow's decoder and Python's treat
#: them differently in places, and a raw newline would split the record), a backslash (escapes:
#: surrogates, keys spelled with escapes), a `NaN`/`Inf` token (Arrow knows spellings Python does
#: not), a `heartbeat`, a bracket after a colon (a nested value, which only the judge's depth
#: rules take: every value of an object follows its key's colon, so every nested value of a
#: record starts with one; a bracket inside a string, as in the route "/items/{id}", does not,
#: unless the string holds ":{" itself, which only sends that record the slow way).
_SCREEN = r"[\x00-\x1f]|\\|NaN|Inf|heartbeat|:\s*[\[{]"


class _Plan:
    """How a chunk is screened and decoded for a set of contract fields."""

    __slots__ = ("as_numbers", "as_text", "screen", "text_screen")

    def __init__(self, fields: tuple[EventField, ...]) -> None:
        # a value that cannot be of the field's type: strings start with a quote, the rest with
        # a digit or a minus sign; `null` is absent for all. `text_screen` is the same with
        # times that start with a quote: records with every time written as text
        numbers, text = [], []
        for f in fields:
            name = re.escape(f.name)
            wrong = '[^"n]' if f.type == "string" else "[^-0-9n]"
            numbers.append(f'"{name}":{wrong}')
            text.append(f'"{name}":' + ('[^"n]' if f.type == "time" else wrong))
        self.screen = "|".join([_SCREEN, *numbers])
        has_times = any(f.type == "time" for f in fields)
        self.text_screen = "|".join([_SCREEN, *text]) if has_times else None
        self.as_numbers = _options(fields, text_times=False)
        self.as_text = _options(fields, text_times=True)


def _options(fields: tuple[EventField, ...], text_times: bool) -> pj.ParseOptions:
    types = dict(_DECODED, time=pa.string()) if text_times else _DECODED
    schema = pa.schema([(f.name, types[f.type]) for f in fields])
    return pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=False
    )


@lru_cache(maxsize=8)
def _plan(fields: tuple[EventField, ...]) -> _Plan:
    return _Plan(fields)


def _candidates(
    values: pa.Array, plan: _Plan
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The records to decode with times as numbers, and those to decode with times as text."""
    text = values.view(pa.string())  # same layout; only ASCII rows are ever used as text
    ok = pc.and_kleene(
        pc.and_kleene(
            pc.less_equal(pc.binary_length(values), MAX_CANDIDATE_BYTES),
            pc.string_is_ascii(text),
        ),
        pc.and_kleene(pc.starts_with(text, "{"), pc.ends_with(text, "}")),
    )
    shaped = _mask(ok.fill_null(False))
    passed = shaped & ~_mask(pc.match_substring_regex(text, plan.screen).fill_null(True))
    iso = np.zeros(len(passed), dtype=bool)
    # the few that failed the screen (times as text, heartbeats, malformed records): those with
    # every time written as text, screened again, only they
    rest = np.flatnonzero(shaped & ~passed)
    if len(rest) and plan.text_screen is not None:
        again = pc.match_substring_regex(text.take(pa.array(rest)), plan.text_screen)
        iso[rest[~_mask(again.fill_null(True))]] = True
    return passed, iso


def _mask(found: pa.Array) -> npt.NDArray[np.bool_]:
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


#: The one ISO-8601 spelling of a time the fast path takes, `YYYY-MM-DDTHH:MM:SS.mmmZ`
#: (JavaScript's `Date.toISOString`; `datetime.fromisoformat` reads it as exactly that UTC
#: millisecond if the date exists): where its 24 characters hold digits, and what the others are.
_ISO_DIGITS = np.array([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22])
_ISO_MARKS = ((4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, "."), (23, "Z"))


def _iso_ms(col: pa.ChunkedArray) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Times in the `_ISO_DIGITS` spelling as epoch milliseconds, and where they are valid dates.

    Null stays null (absent). Where the text is not in that spelling or names no real instant
    (month 13, February 30, hour 24, second 60), the row is not valid: Python judges it. Read
    from the strings' bytes with numpy (the spelling is of fixed width).
    """
    text = col.combine_chunks()
    n = len(text)
    known = np.asarray(text.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    ms = np.zeros(n, dtype=np.int64)
    real = np.zeros(n, dtype=bool)
    if known.any():
        _, offsets_buf, data_buf = text.buffers()
        offsets = np.frombuffer(offsets_buf, np.int32, count=n + 1, offset=4 * text.offset)
        rows = np.flatnonzero(known & (np.diff(offsets) == 24))
        chars = np.frombuffer(data_buf, np.uint8)[offsets[rows, None] + np.arange(24)]
        d = chars.astype(np.int64) - ord("0")
        spelled = ((d[:, _ISO_DIGITS] >= 0) & (d[:, _ISO_DIGITS] <= 9)).all(axis=1)
        for at, mark in _ISO_MARKS:
            spelled &= chars[:, at] == ord(mark)

        def number(first: int, width: int) -> npt.NDArray[np.int64]:
            out = np.zeros(len(rows), dtype=np.int64)
            for k in range(first, first + width):
                out = out * 10 + d[:, k]
            return out

        y, m, day = number(0, 4), number(5, 2), number(8, 2)
        hh, mm, ss, frac = number(11, 2), number(14, 2), number(17, 2), number(20, 3)
        leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
        days_in = _MONTH_DAYS[np.clip(m, 0, 12)] + ((m == 2) & leap)
        fine = spelled & (y >= 1) & (m >= 1) & (m <= 12) & (day >= 1) & (day <= days_in)
        fine &= (hh < 24) & (mm < 60) & (ss < 60)
        days = _days_from_civil(y, np.clip(m, 1, 12), day)
        ms[rows] = days * 86_400_000 + hh * 3_600_000 + mm * 60_000 + ss * 1_000 + frac
        real[rows[fine]] = True
    return pa.array(ms, pa.int64(), mask=~real), real | ~known


_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _days_from_civil(
    y: npt.NDArray[np.int64], m: npt.NDArray[np.int64], d: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's `days_from_civil`)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * np.where(m > 2, m - 3, m + 9) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _read(lines: pa.Array, options: pj.ParseOptions) -> pa.Table | int | None:
    """One newline-joined decode of `lines`.

    The table; or, if the decode fails, the line Arrow names as the failing one (its message
    says "in row N" for a syntax or type error) or None (a conversion error names no line, or
    a line held more than one object).
    """
    n = len(lines)
    doc = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines), b"\n")
    buf = doc[0].as_buffer()
    read = pj.ReadOptions(use_threads=False, block_size=max(1 << 20, buf.size + 1))
    try:
        table = pj.read_json(pa.BufferReader(buf), read_options=read, parse_options=options)
    except pa.ArrowInvalid as e:
        row = _ROW.search(str(e))
        return int(row.group(1)) if row and int(row.group(1)) < n else None
    return table if table.num_rows == n else None


_ROW = re.compile(r"in row (\d+)")


def _decode(
    lines: pa.Array,
    at: npt.NDArray[np.int64],
    options: pj.ParseOptions,
    out: list[Piece],
    budget: list[int],
) -> None:
    """Decode `lines` (the chunk's records `at`), leaving out the ones that fail.

    A failing line Arrow names is left out: the lines before it are decoded again, the lines
    after it in halves (they may hold more failures). A failure Arrow does not place halves the
    piece, down to `_SMALLEST` lines, which are left to Python whole. `budget`
    is how many more lines may be decoded for this chunk (`_RETRIES` times its size): a chunk
    full of failing records must not cost more here than judging them one by one would.
    """
    if len(lines) > budget[0]:
        return
    budget[0] -= len(lines)
    got = _read(lines, options)
    if isinstance(got, pa.Table):
        out.append((at, got))
    elif got is not None:  # lines before it decoded; the rest may hold more failures: halve
        if got:
            _decode(lines.slice(0, got), at[:got], options, out, budget)
        rest, after = lines.slice(got + 1), at[got + 1 :]
        if len(rest) > _SMALLEST:
            half = len(rest) // 2
            _decode(rest.slice(0, half), after[:half], options, out, budget)
            _decode(rest.slice(half), after[half:], options, out, budget)
        elif len(rest):
            _decode(rest, after, options, out, budget)
    elif len(lines) > _SMALLEST:
        half = len(lines) // 2
        _decode(lines.slice(0, half), at[:half], options, out, budget)
        _decode(lines.slice(half), at[half:], options, out, budget)


def _valid(f: EventField, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Where a decoded value passes the field's rules (`EventField.checker`)."""
    if f.type == "string":
        ok = col.is_valid()
        if f.required:
            ok = pc.and_(ok, pc.greater(pc.utf8_length(col), 0))
        if f.reserved:
            ok = pc.and_(ok, pc.invert(pc.is_in(col, pa.array(list(f.reserved), pa.string()))))
        if f.max_length is not None:
            ok = pc.and_(ok, pc.less_equal(pc.utf8_length(col), f.max_length))
    elif f.type == "time":
        ok = pc.and_(pc.greater_equal(col, MIN_TIME_MS), pc.less(col, MAX_TIME_MS))
    elif f.type == "float":
        # finite, and not -0.0: Python reads an integer -0 as 0.0, Arrow as -0.0
        # (1 / -0.0 is -inf; so is 1 / -5e-324, which is left to Python too)
        negative_zero = pc.equal(pc.divide(1.0, col), -math.inf)
        ok = pc.and_(pc.is_finite(col), pc.invert(negative_zero))
        if f.minimum is not None:
            ok = pc.and_(ok, pc.greater_equal(col, f.minimum))
    else:
        ok = pc.and_(pc.greater_equal(col, -_INT32), pc.less(col, _INT32))
    ok = ok.fill_null(False)
    return ok if f.required else pc.or_(ok, col.is_null())


def _typed(f: EventField, col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    if f.type == "int":
        return arr.cast(pa.int32(), safe=False)  # in range in every row it vouches for
    return arr


def vouch(values: pa.Array, fields: Sequence[EventField], n: int | None = None) -> Vouched:
    """The records of `values` (binary, one Kafka value each) this path can judge, judged.

    `n`: the chunk's size when `values` holds only its first records (the rest left to Python).
    """
    fields = tuple(fields)
    plan = _plan(fields)
    n = len(values) if n is None else n
    as_numbers, as_text = _candidates(values, plan)
    budget = [_RETRIES * int(as_numbers.sum() + as_text.sum())]
    pieces: list[Piece] = []
    cand = np.flatnonzero(as_numbers)
    if len(cand):
        _decode(values.take(pa.array(cand)), cand, plan.as_numbers, pieces, budget)
    spelled: list[npt.NDArray[np.bool_]] = [np.ones(len(at), dtype=bool) for at, _ in pieces]
    cand = np.flatnonzero(as_text)
    if len(cand):
        texts: list[Piece] = []
        _decode(values.take(pa.array(cand)), cand, plan.as_text, texts, budget)
        for at, table in texts:
            fine = np.ones(len(at), dtype=bool)
            for f in fields:
                if f.type == "time":
                    ms, valid = _iso_ms(table.column(f.name))
                    table = table.set_column(table.schema.get_field_index(f.name), f.name, ms)
                    fine &= valid
            pieces.append((at, table))
            spelled.append(fine)
    ok = np.zeros(n, dtype=bool)
    rows = np.zeros(n, dtype=np.int64)
    if not pieces:
        return Vouched(ok, rows, {f.column: pa.array([], _typed_type(f)) for f in fields})
    table = pa.concat_tables([t for _, t in pieces])
    decoded = np.concatenate([at for at, _ in pieces])
    passed = np.concatenate(spelled)
    for f in fields:
        passed &= np.asarray(_valid(f, table.column(f.name)).to_numpy(), dtype=bool)
    ok[decoded[passed]] = True
    rows[decoded] = np.arange(len(decoded))
    return Vouched(ok, rows, {f.column: _typed(f, table.column(f.name)) for f in fields})


def _typed_type(f: EventField) -> pa.DataType:
    return pa.int32() if f.type == "int" else _DECODED[f.type]
