"""A view of the page as URL query parameters, and back (pure).

Every choice a viewer makes (services, window kind, time range, latency range and service,
toggles, wall mode) lives in the page's URL, so a link shows a colleague the same view and a
wall screen's bookmark keeps its layout. Only choices that differ from the defaults are
written, so the plain URL stays plain. A parameter that cannot be read (a typo, a removed
service) is left out and named in `View.problems`: the page shows the rest of the view and says
what it ignored, instead of failing.

    ?svc=checkout,search&kind=hopping&range=1h&lrange=5m&lsvc=checkout&broker=1&total=0&wall=1
    ?top=20&by=errors     (with no services chosen: the 20 with the most errors; top=all: every one)
    ?dim=route&dof=checkout&dby=p99    (the breakdown: checkout's routes by p99)
    ?dim=route&dval=/cart              (the breakdown: the services /cart comes from)
    ?only=region:eu-west-1             (the per-window charts: the events of one value only)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode, urlsplit, urlunsplit

from tidegauge.core.durations import format_duration, parse_duration
from tidegauge.core.store.ranking import RANK_BY

__all__ = ["WALL_PAGE", "View", "from_params", "link", "to_params", "wall_link"]

#: The wall page's path under the server's root (dashboard/wall.py), without its leading "/".
WALL_PAGE = "tidegauge/wall"


@dataclass(frozen=True)
class View:
    """Everything a link restores. Durations in ms; None = the page's default."""

    services: tuple[str, ...] = ()
    kind: str = "tumbling"
    range_ms: int | None = None
    latency_range_ms: int | None = None
    latency_service: str = "*"
    show_broker: bool = False
    show_total: bool = True
    wall: bool = False
    #: With no services chosen, how many to draw (0: all; None: the page's default), by what.
    top: int | None = None
    rank_by: str = "events"
    #: The breakdown panel: a dimension (None: the first stored), whose values (`*`: all
    #: services), one value's services instead, and what ranks them.
    dimension: str | None = None
    dimension_of: str = "*"
    dimension_value: str | None = None
    dimension_by: str = "events"
    #: (dimension, value): the per-window charts show the events with that value only.
    only: tuple[str, str] | None = None
    #: Parameters that could not be read, as "name=value: why".
    problems: tuple[str, ...] = field(default=(), compare=False)


_DEFAULT = View()


def to_params(v: View) -> dict[str, str]:
    """The query parameters of `v`: only what differs from the defaults."""
    out: dict[str, str] = {}
    if v.services:
        out["svc"] = ",".join(v.services)
    if v.kind != _DEFAULT.kind:
        out["kind"] = v.kind
    if v.range_ms is not None:
        out["range"] = format_duration(v.range_ms)
    if v.latency_range_ms is not None:
        out["lrange"] = format_duration(v.latency_range_ms)
    if v.latency_service != _DEFAULT.latency_service:
        out["lsvc"] = v.latency_service
    if v.show_broker:
        out["broker"] = "1"
    if not v.show_total:
        out["total"] = "0"
    if v.wall:
        out["wall"] = "1"
    if v.top is not None:
        out["top"] = str(v.top) if v.top else "all"
    if v.rank_by != _DEFAULT.rank_by:
        out["by"] = v.rank_by
    if v.dimension is not None:
        out["dim"] = v.dimension
    if v.dimension_of != _DEFAULT.dimension_of:
        out["dof"] = v.dimension_of
    if v.dimension_value is not None:
        out["dval"] = v.dimension_value
    if v.dimension_by != _DEFAULT.dimension_by:
        out["dby"] = v.dimension_by
    if v.only is not None:
        out["only"] = f"{v.only[0]}:{v.only[1]}"
    return out


def from_params(
    params: Mapping[str, str | Sequence[str]],
    kinds: Sequence[str],
    ranges_ms: Sequence[int],
    latency_ranges_ms: Sequence[int],
) -> View:
    """The view a URL asks for; what it cannot give is left at its default and in `problems`.

    `kinds`, `ranges_ms` and `latency_ranges_ms` are what the page offers: a range it does not
    offer is a problem, not a new choice.
    """
    problems: list[str] = []
    v = View()

    def get(name: str) -> str | None:
        raw = params.get(name)
        if raw is None:
            return None
        return raw if isinstance(raw, str) else (raw[-1] if raw else None)

    def flag(name: str, value: str) -> bool | None:
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        problems.append(f"{name}={value}: not 1 or 0")
        return None

    def duration(name: str, value: str, offered: Sequence[int]) -> int | None:
        try:
            ms = parse_duration(value)
        except ValueError as e:
            problems.append(f"{name}={value}: {e}")
            return None
        if ms not in offered:
            shown = ", ".join(format_duration(x) for x in offered)
            problems.append(f"{name}={value}: not one of {shown}")
            return None
        return ms

    if (s := get("svc")) is not None:
        v = replace(v, services=tuple(x for x in (p.strip() for p in s.split(",")) if x))
    if (k := get("kind")) is not None:
        if k in kinds:
            v = replace(v, kind=k)
        else:
            problems.append(f"kind={k}: not one of {', '.join(kinds)}")
    if (r := get("range")) is not None:
        v = replace(v, range_ms=duration("range", r, ranges_ms))
    if (r := get("lrange")) is not None:
        v = replace(v, latency_range_ms=duration("lrange", r, latency_ranges_ms))
    if (s := get("lsvc")) is not None and s:
        v = replace(v, latency_service=s)
    if (t := get("top")) is not None:
        if t == "all":
            v = replace(v, top=0)
        elif t.isdigit() and int(t) > 0:
            v = replace(v, top=int(t))
        else:
            problems.append(f"top={t}: not a number of services or 'all'")
    if (by := get("by")) is not None:
        if by in RANK_BY:
            v = replace(v, rank_by=by)
        else:
            problems.append(f"by={by}: not one of {', '.join(RANK_BY)}")
    if (dim := get("dim")) is not None and dim:
        v = replace(v, dimension=dim)
    if (of := get("dof")) is not None and of:
        v = replace(v, dimension_of=of)
    if (val := get("dval")) is not None and val:
        v = replace(v, dimension_value=val)
    if (dby := get("dby")) is not None:
        if dby in RANK_BY:
            v = replace(v, dimension_by=dby)
        else:
            problems.append(f"dby={dby}: not one of {', '.join(RANK_BY)}")
    if (only := get("only")) is not None:
        dim, sep, value = only.partition(":")
        if sep and dim and value:
            v = replace(v, only=(dim, value))
        else:
            problems.append(f"only={only}: not DIMENSION:VALUE")
    toggles = {}
    for name, attr in (("broker", "show_broker"), ("total", "show_total"), ("wall", "wall")):
        if (x := get(name)) is not None and (b := flag(name, x)) is not None:
            toggles[attr] = b
    v = replace(v, show_broker=toggles.get("show_broker", v.show_broker))
    v = replace(
        v, show_total=toggles.get("show_total", v.show_total), wall=toggles.get("wall", v.wall)
    )
    return replace(v, problems=tuple(problems))


def link(page_url: str, v: View) -> str:
    """`page_url` (query and fragment dropped) with `v`'s parameters."""
    base = page_url.split("#", 1)[0].split("?", 1)[0]
    params = to_params(v)
    return f"{base}?{urlencode(params, safe=',*')}" if params else base


def wall_link(page_url: str, v: View) -> str:
    """The wall page (dashboard/wall.py) of the server serving `page_url`, showing view `v`.

    The page's own path is replaced; the view's parameters are the same, less wall mode.
    """
    parts = urlsplit(page_url)
    params = to_params(replace(v, wall=False))
    query = urlencode(params, safe=",*") if params else ""
    return urlunsplit((parts.scheme, parts.netloc, "/" + WALL_PAGE, query, ""))
