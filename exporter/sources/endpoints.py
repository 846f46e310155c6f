"""Where a server's endpoints are, found from one base URL.

An operator knows the address the server listens on (``http://127.0.0.1:30000``), not where
each engine keeps its numbers: SGLang serves ``/metrics`` (with ``--enable-metrics``) and
``/server_info`` (``/get_server_info`` before 0.5.6), vLLM ``/metrics`` and no server info,
TensorRT-LLM its Prometheus exposition at ``/prometheus/metrics`` (its ``/metrics`` is JSON).
From the base URL each endpoint gets its candidates, tried in order until one answers as its
engine does; a URL of one endpoint given where the base URL is expected names both. An
explicit ``metrics_url`` or ``server_info_url`` is taken as given (an override).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

METRICS_PATHS = ("/metrics", "/prometheus/metrics")
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
_ENDPOINT_PATHS = (*METRICS_PATHS, *SERVER_INFO_PATHS)


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
        info = tuple(dict.fromkeys((server_info_url, _older_name(server_info_url))))
    elif base is not None:
        first = (named,) if named in SERVER_INFO_PATHS else ()
        paths = (*first, *(p for p in SERVER_INFO_PATHS if p != named))
        info, optional = tuple(base + p for p in paths), True
    return Endpoints(metrics, info, optional, base)


def _older_name(url: str) -> str:
    """``/server_info`` -> ``/get_server_info``: SGLang before 0.5.6 answers only that."""
    parts = urlsplit(url)
    path = parts.path.rsplit("/", 1)[0] + "/get_server_info"
    return urlunsplit(parts._replace(path=path))
