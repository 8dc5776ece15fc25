"""A batch's rows split by store: the services' own, and each dimension's slices.

The stateful step names a slice's rows `service SEP dimension SEP value`
(tidegauge/core/dimensions.py); the sink writes them to the dimension's store (`Keys.by`) as
member `service SEP value`, beside the services' rows, in the same transaction.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, TypeVar

from jobs.state.rows import BatchRows
from tidegauge.core.dimensions import SEP, member, split_group

__all__ = ["split_rows"]

_T = TypeVar("_T")


def split_rows(rows: BatchRows) -> tuple[BatchRows, dict[str, BatchRows]]:
    """(the services' rows, dimension -> its slices' rows); `rows` itself when it has no slices.

    A slice has windows, late rows, stragglers and duplicates; arrivals, late events, dead
    letters and counts are the services' (one per event, not per slice).
    """
    kinds = ("windows", "late", "stragglers", "duplicates")
    if not any(SEP in x.service for k in kinds for x in getattr(rows, k)):
        return rows, {}
    by_dim: dict[str, BatchRows] = defaultdict(BatchRows)
    own: dict[str, list[Any]] = {}
    for k in kinds:
        own[k] = []
        for x in getattr(rows, k):
            parts = split_group(x.service)
            if parts is None:
                own[k].append(x)
            else:
                service, dim, value = parts
                getattr(by_dim[dim], k).append(_renamed(x, member(service, value)))
    mine = dataclasses.replace(rows)
    for k, v in own.items():
        setattr(mine, k, v)
    return mine, dict(by_dim)


def _renamed(x: _T, name: str) -> _T:
    return dataclasses.replace(x, service=name)  # type: ignore[type-var]
