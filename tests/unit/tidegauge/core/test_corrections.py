"""One-pass parses of a window's late and straggler hashes (tidegauge/core/store/corrections.py).

The references are the field-by-field readers they stand in for (`per_service`,
`all_late_fields`, `straggler_counts`, `straggler_revisions`), on hashes as the sink and the
roll-ups write them: per-batch fields, a batch's `*` field or none (stores written before),
folded `-1` fields.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tidegauge.core.late_agg import LateAgg
from tidegauge.core.store.corrections import late_fields
from tidegauge.core.store.keys import (
    ALL_SERVICES,
    FOLDED,
    folded_stragglers,
    per_service,
    split_batch_field,
    straggler_counts,
    straggler_revisions,
    stragglers_of,
)


def all_late_fields(fields: dict[Any, bytes]) -> list[bytes]:
    """The reference: the fields of a late hash whose merge is `*`'s late aggregate, in order.

    A batch writes its late rows' merge as "*|batch" beside the services' own, so `*` is one
    field per batch, not one per (service, batch); a batch that wrote none (stores written
    before, a roll-up of them) counts by its services' fields.
    """
    by_batch: dict[int, dict[str, bytes]] = {}
    for k, v in fields.items():
        service, batch = split_batch_field(k)
        by_batch.setdefault(batch, {})[service] = v
    out: list[bytes] = []
    for batch in sorted(by_batch):
        own = by_batch[batch]
        total = own.get(ALL_SERVICES)
        out += [total] if total is not None else [own[s] for s in sorted(own)]
    return out


def _late(rng: np.random.Generator, n: int) -> bytes:
    agg = LateAgg()
    agg.add(rng.uniform(0, 5_000, n), rng.uniform(0, 900, n))
    return agg.to_bytes()


def _late_hash(seed: int, with_totals: bool) -> dict[bytes, bytes]:
    rng = np.random.default_rng(seed)
    fields: dict[bytes, bytes] = {}
    for batch in [FOLDED, *rng.choice(50, 6, replace=False).tolist()]:
        services = rng.choice(30, int(rng.integers(1, 12)), replace=False)
        for s in services.tolist():
            fields[f"svc-{s:02d}|{batch}".encode()] = _late(rng, int(rng.integers(1, 9)))
        if with_totals and rng.random() < 0.7:  # some batches wrote theirs, some did not
            fields[f"{ALL_SERVICES}|{batch}".encode()] = _late(rng, 3)
    keys = list(fields)
    rng.shuffle(keys)  # type: ignore[arg-type]
    return {k: fields[k] for k in keys}


@pytest.mark.parametrize("with_totals", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_late_fields_equal_the_field_by_field_readers(seed: int, with_totals: bool) -> None:
    fields = _late_hash(seed, with_totals)
    got = late_fields(fields)
    assert got.counts == per_service(fields, LateAgg.count_of)
    assert got.every == all_late_fields(fields)
    owned = late_fields(fields, owned=True)  # a dimension's store: members only
    expected = per_service(fields, LateAgg.count_of)
    expected.pop(ALL_SERVICES, None)
    assert owned.counts == expected and owned.every == []
    assert late_fields({}).counts == {} and late_fields({}).every_merged is None


def test_stragglers_of_equals_counts_and_revisions() -> None:
    rng = np.random.default_rng(7)
    fields: dict[bytes, bytes] = {}
    for batch in rng.choice(100, 20, replace=False).tolist():
        for s in rng.choice(40, int(rng.integers(1, 15)), replace=False).tolist():
            fields[f"svc-{s:02d}|{batch}".encode()] = str(int(rng.integers(1, 9))).encode()
    for s in range(0, 40, 3):  # a roll-up's folded fields, `*`'s among them
        fields[f"svc-{s:02d}|{FOLDED}".encode()] = folded_stragglers(5 + s, 2 + s % 4).encode()
    fields[f"{ALL_SERVICES}|{FOLDED}".encode()] = folded_stragglers(99, 17).encode()
    assert stragglers_of(fields) == (straggler_counts(fields), straggler_revisions(fields))
    assert stragglers_of({}) == ({}, {})
