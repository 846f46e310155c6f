"""``specwatch doctor --url`` checks its URL as ``specwatch run`` does, before any request."""

from __future__ import annotations

import pytest

from tests.support.daemon import doctor
from tests.support.tools import free_port

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("localhost:30000", "must be an http:// or https:// URL"),
        ("ftp://127.0.0.1:30000", "must be an http:// or https:// URL"),
        ("http://127.0.0.1:99999", "the port is not a number from 0 to 65535"),
        ("http://127.0.0.1:30000 /x", "must be an http:// or https:// URL"),
    ],
)
def test_a_bad_url_is_refused_on_one_line(url: str, problem: str) -> None:
    result = doctor("--url", url)
    assert result.returncode == 2
    assert result.stderr.strip() == f"specwatch doctor: error: --url {url}: {problem}"
    assert result.stdout == ""


@pytest.mark.parametrize("endpoint", ["/metrics", "/server_info", "/metrics/"])
def test_an_endpoint_url_is_read_as_the_base_url(endpoint: str) -> None:
    """Not "start SGLang with --enable-metrics", nor a refusal: the server is asked at the
    base URL's endpoints, and nothing answering there is said as such."""
    url = f"http://127.0.0.1:{free_port()}{endpoint}"
    result = doctor("--url", url)
    assert result.returncode == 1, result.stderr
    assert "metrics: down (connection refused at /metrics)" in result.stdout
    assert "--enable-metrics" not in result.stdout + result.stderr
