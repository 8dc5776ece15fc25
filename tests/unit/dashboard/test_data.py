"""What the user picked (dashboard/data.py `Filters`), without Redis."""

from __future__ import annotations

import pytest

from dashboard import data

pytestmark = pytest.mark.unit


def test_filters_pick_known_services_or_all() -> None:
    f = data.Filters(services=("api", "gone"))
    assert f.selected(["api", "web"]) == ["api"]
    assert data.Filters().selected(["api", "web"]) == ["api", "web"]
    with pytest.raises(ValueError):
        data.Filters(kind="rolling")  # not a window kind
