"""Where a server's endpoints are, found from one base URL.

An operator knows the address the server listens on (``http://127.0.0.1:30000``), not where
each engine keeps its numbers: each engine says where (its ``metrics_paths`` and
``server_info_paths``), and the paths of every engine are tried. From the base URL each
endpoint gets its candidates, tried in order until one answers as its engine does; a URL of
one endpoint given where the base URL is expected names both. An explicit ``metrics_url`` or
``server_info_url`` is taken as given (an override), with its engine's other names for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from exporter.engines import registry


def _in_order(paths: Iterable[str]) -> tuple[str, ...]:
    """Each path once, the one most engines serve first (ties in the registry's order)."""
    shared = Counter(paths)
    return tuple(sorted(shared, key=lambda path: -shared[path]))


METRICS_PATHS = _in_order(p for engine in registry.ENGINES for p in engine.metrics_paths)
SERVER_INFO_PATHS = _in_order(p for engine in registry.ENGINES for p in engine.server_info_paths)
# Longest first: ``/prometheus/metrics`` is one endpoint, not ``/metrics`` under ``/prometheus``.
_ENDPOINT_PATHS = tuple(sorted((*METRICS_PATHS, *SERVER_INFO_PATHS), key=len, reverse=True))


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Each endpoint's candidate URLs in the order they are tried.

    ``server_info_optional``: server info was derived from a base URL, so a server that has
    none (vLLM, TensorRT-LLM, anything else behind the URL) answering 404 there is the
    engine's design, not a failure to report.
    """

    metrics: tuple[str, ...] = ()
    server_info: tuple[str, ...] = ()
    server_info_optional: bool = False
    base: str | None = None


def split_base(url: str) -> tuple[str, str | None]:
    """``url`` without a trailing endpoint path, and that path (None when it had none).

    ``http://h:30000/metrics/`` -> (``http://h:30000``, ``/metrics``); a path prefix before
    the endpoint (a reverse proxy's ``/sglang``) stays in the base.
    """
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for endpoint in _ENDPOINT_PATHS:
        if path.endswith(endpoint):
            base_path = path.removesuffix(endpoint)
            return urlunsplit(parts._replace(path=base_path, query="", fragment="")), endpoint
    return urlunsplit(parts._replace(path=path)), None


def is_base(url: str) -> bool:
    """Whether ``url`` names a server and no path (``http://h:30000`` or ``.../``)."""
    return urlsplit(url).path.strip("/") == ""


def find_endpoints(
    url: str | None = None, metrics_url: str | None = None, server_info_url: str | None = None
) -> Endpoints:
    """The candidates for each endpoint: given URLs as they are, the rest from ``url``.

    A ``metrics_url`` with no path is a base URL pasted into the wrong place: asking the
    server's ``/`` would answer 404 and read as metrics turned off, so it is taken as ``url``.
    """
    if metrics_url is not None and is_base(metrics_url):
        url, metrics_url = url or metrics_url, None
    base, named = split_base(url) if url is not None else (None, None)
    metrics: tuple[str, ...] = ()
    if metrics_url is not None:
        metrics = (metrics_url,)
    elif base is not None:
        first = (named,) if named in METRICS_PATHS else ()
        metrics = tuple(base + p for p in (*first, *(p for p in METRICS_PATHS if p != named)))
    info: tuple[str, ...] = ()
    optional = False
    if server_info_url is not None:
        info = (server_info_url, *_other_names(server_info_url))
    elif base is not None:
        first = (named,) if named in SERVER_INFO_PATHS else ()
        paths = (*first, *(p for p in SERVER_INFO_PATHS if p != named))
        info, optional = tuple(base + p for p in paths), True
    return Endpoints(metrics, info, optional, base)


def _other_names(url: str) -> tuple[str, ...]:
    """``url`` at the other paths of the engine whose server-info path it ends in (SGLang's
    ``/server_info`` -> ``/get_server_info``, the only name before 0.5.6)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for engine in registry.ENGINES:
        said = next((p for p in engine.server_info_paths if path.endswith(p)), None)
        if said is not None:
            base = path.removesuffix(said)
            others = (p for p in engine.server_info_paths if p != said)
            return tuple(urlunsplit(parts._replace(path=base + p)) for p in others)
    return ()
