"""The Redis key layout and the read API. docs/redis.md is the human-readable twin.

The job's sink writes these keys (jobs/sink/redis_sink.py); `tidegauge query`, the dashboard and the
tests read them only through this package, so there is one definition of what is stored.

All times are epoch milliseconds (UTC). Window metrics are stored as small JSON documents in a
hash per window, one field per service plus `*` (all services).

    keys.py      the key layout and every field format      records.py   rows, status, letters
    windows.py   windows and ranges                         status.py    status, batches, letters
    lateness.py  late rows, what-if, late events            arrivals.py  the three time domains
    index.py     window indexes and the closed-window memo
    tiers.py     retention tiers: what each holds
"""

from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.store.arrivals import (
    TIME_DOMAINS,
    ArrivalRow,
    event_arrivals,
    event_spec,
    read_arrival_size,
    read_arrivals,
    read_newest_arrival_start,
)
from tidegauge.core.store.dimensions import dimension_values, read_dimensions
from tidegauge.core.store.keys import (
    ALL_SERVICES,
    ControlFields,
    Keys,
    batch_field,
    connect,
    split_batch_field,
    straggler_value,
)
from tidegauge.core.store.lateness import (
    LateCounters,
    LatenessResult,
    read_late_counters,
    read_late_events,
    read_lateness,
)
from tidegauge.core.store.records import (
    DeadLetter,
    JobStatus,
    WindowRow,
)
from tidegauge.core.store.status import (
    overflow_summary,
    read_batches,
    read_dead_counts,
    read_dead_letters,
    read_status,
    read_watermarks,
)
from tidegauge.core.store.tiers import StoredRetention, read_retention
from tidegauge.core.store.windows import (
    MERGE_BLOCK,
    METRIC_FIELDS,
    RangeAggs,
    RangeResult,
    TieredWindows,
    read_newest_window_start,
    read_peaks,
    read_range,
    read_range_merged,
    read_services,
    read_window_specs,
    read_windows,
    read_windows_tiered,
    stored_spec,
)

__all__ = [
    "StoredRetention",
    "TieredWindows",
    "read_retention",
    "read_windows_tiered",
    "read_newest_arrival_start",
    "read_newest_window_start",
    "ControlFields",
    "batch_field",
    "split_batch_field",
    "straggler_value",
    "ALL_SERVICES",
    "TIME_DOMAINS",
    "ArrivalRow",
    "ClosedWindows",
    "LateCounters",
    "LatenessResult",
    "event_arrivals",
    "event_spec",
    "read_arrival_size",
    "read_arrivals",
    "read_late_counters",
    "read_late_events",
    "read_lateness",
    "read_watermarks",
    "DeadLetter",
    "METRIC_FIELDS",
    "JobStatus",
    "Keys",
    "MERGE_BLOCK",
    "RangeAggs",
    "RangeResult",
    "WindowRow",
    "connect",
    "overflow_summary",
    "read_batches",
    "read_dead_counts",
    "read_dead_letters",
    "read_services",
    "read_dimensions",
    "dimension_values",
    "read_status",
    "read_peaks",
    "read_range",
    "read_range_merged",
    "read_window_specs",
    "stored_spec",
    "read_windows",
]
