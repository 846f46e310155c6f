"""Credential scrubbing for anything a server tells about itself.

SGLang's ``/server_info`` returns its API key unredacted and its start-up line prints every
server argument; both pass through here before any other code sees them, so no later path
(metrics, logs, ``doctor`` output) can leak a key. It knows no engine and no layer: the log
readers and the upstream scraper share it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Name parts that mark a credential. Matching whole ``_``-separated parts (not substrings)
# keeps ``speculative_num_draft_tokens`` while dropping ``api_key`` or ``hf_token``.
_SECRET_PARTS = frozenset(
    {"key", "keys", "token", "secret", "secrets", "password", "passwd", "credential", "apikey"}
)
_SECRET_SUBSTRINGS = ("secret", "password", "passwd", "apikey", "api_key", "credential")


def is_secret_name(name: str) -> bool:
    """True for a field that may hold a credential (``api_key``, ``admin_api_key``, ``hf_token``).

    ``/server_info`` returns the API key unredacted; dropping such fields where they are parsed
    means no later code path (metrics, logs, doctor output) can leak them.
    """
    lowered = name.lower()
    if any(part in lowered for part in _SECRET_SUBSTRINGS):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[^a-z0-9]+", lowered))


def drop_secrets(value: Any) -> Any:
    """A copy of ``value`` with every secret-named mapping key removed, at any depth.

    ``/server_info`` repeats all server args inside ``internal_states``; recursion covers that.
    """
    if isinstance(value, Mapping):
        return {
            key: drop_secrets(item)
            for key, item in value.items()
            if not (isinstance(key, str) and is_secret_name(key))
        }
    if isinstance(value, list | tuple):
        return [drop_secrets(item) for item in value]
    return value


def url_without_secrets(url: str) -> str:
    """``url`` for a log line: without user, password or query, any of which may carry a key."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))[:200]
