"""What a generated request says besides the contract's fields: its route, method, region, version.

OpenTelemetry spans always carry them (`--format otlp_*`); the contract's JSON carries them with
`--attributes`, as optional string fields `tidegauge job --dimension` reads. Each is fixed by a
hash of the event id (route, method, version) or of the service name (region), never drawn from
the run's random streams: turning them on changes no other field of a seeded stream, and a test
recomputes them from the record's id alone.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import zlib
from typing import NamedTuple

__all__ = ["REGIONS", "ROUTES", "VERSIONS", "Attributes", "RequestAttributes"]

#: The routes of every generated service, and their shares of its requests.
ROUTES = (
    ("/api/items/{id}", "GET", 0.34),
    ("/api/search", "GET", 0.22),
    ("/api/cart", "POST", 0.16),
    ("/", "GET", 0.12),
    ("/api/login", "POST", 0.08),
    ("/api/checkout", "POST", 0.05),
    ("/health", "GET", 0.03),
)
#: Each generated service runs in one region (by its name): the first `--regions` of these.
REGIONS = (
    "eu-west-1",
    "us-east-1",
    "ap-southeast-2",
    "us-west-2",
    "eu-central-1",
    "ap-northeast-1",
    "sa-east-1",
    "ca-central-1",
)
#: Every generated service is mid-rollout: the stable version and a canary, by share of requests.
VERSIONS = (("2.3.1", 0.9), ("2.4.0", 0.1))


class RequestAttributes(NamedTuple):
    """A generated request's attributes, named as `--dimension` names them."""

    route: str
    method: str
    region: str
    version: str

    def as_dimensions(self) -> dict[str, str]:
        """{dimension: value}."""
        return self._asdict()

    def json_members(self) -> str:
        """`"route":"/x","method":"GET",...`: the four as members of a compact JSON object."""
        return _json_members(self)


@functools.lru_cache(maxsize=4096)
def _json_members(a: RequestAttributes) -> str:
    # a run has few distinct attribute sets: each is encoded once, not once per event
    return ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in zip(a._fields, a, strict=True))


class Attributes:
    """The attributes of one run's requests: `routes` routes and `regions` regions.

    Up to seven routes are the built-in ones (`ROUTES`, their shares renormalised); more add
    `/api/v1/r{k}/{id}` routes and the shares follow Zipf's law (the k-th busiest has 1/k of
    the busiest's traffic), as an API's endpoints do: a few busy, a long tail of quiet ones.
    """

    def __init__(self, routes: int = len(ROUTES), regions: int = 3) -> None:
        if not 1 <= routes <= 10_000:
            raise ValueError(f"--routes must be between 1 and 10000, got {routes}")
        if not 1 <= regions <= len(REGIONS):
            raise ValueError(f"--regions must be between 1 and {len(REGIONS)}, got {regions}")
        if routes <= len(ROUTES):
            table = [(r, m) for r, m, _ in ROUTES[:routes]]
            weights = [w for _, _, w in ROUTES[:routes]]
        else:
            extra = routes - len(ROUTES)
            table = [(r, m) for r, m, _ in ROUTES]
            table += [(f"/api/v1/r{k}/{{id}}", "GET" if k % 3 else "POST") for k in range(extra)]
            weights = [1 / (k + 1) for k in range(routes)]
        total = sum(weights)
        self.routes: tuple[tuple[str, str], ...] = tuple(table)
        self.shares: tuple[float, ...] = tuple(w / total for w in weights)
        self._edges = [sum(self.shares[: i + 1]) for i in range(routes)]
        self.regions = REGIONS[:regions]

    def of(self, event_id: str, service: str) -> RequestAttributes:
        """The route, method, region and version of request `event_id` of `service`."""
        u = zlib.crc32(event_id.encode()) / 2**32
        route, method = self.routes[min(bisect.bisect_right(self._edges, u), len(self.routes) - 1)]
        # a hash of its own, so the canary's requests spread over the routes as the others' do
        v = int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=4).digest()) / 2**32
        version = VERSIONS[0][0] if v < VERSIONS[0][1] else VERSIONS[1][0]
        region = self.regions[zlib.crc32(service.encode()) % len(self.regions)]
        return RequestAttributes(route, method, region, version)


#: The attributes `tidegauge produce` gives requests by default (seven routes, three regions).
DEFAULT = Attributes()
