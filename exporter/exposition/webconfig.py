"""``--web-config FILE``: TLS and basic auth in the Prometheus exporter-toolkit format.

Operators already write this file for node_exporter; accepting the same keys means one
secret-management recipe for every exporter on the node. ``/healthz`` stays open so probes
work without credentials.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import bcrypt
import msgspec
from msgspec import Meta

from exporter.exposition.server import StartResponse, WSGIApp
from exporter.exposition.tlsconfig import (
    EncryptedKey,
    TLSConfig,
    build_context,
    check,
    san_refusal,
)
from exporter.settings import (
    MAX_SETTINGS_BYTES,
    ConfigError,
    Invalid,
    Strict,
    load_yaml,
    validate,
)
from exporter.smallfile import read_small_file

# A Go duration as exporter-toolkit writes one: 500ms, 1s, 1m30s.
_GO_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$|^0$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class HTTPServerConfig(Strict, frozen=True):
    http2: bool | None = None  # None: not written (Go's default is on)
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class GoDuration(str):
    """A Go duration as exporter-toolkit writes one (500ms, 1s, 1m30s; a bare 0 too)."""

    __slots__ = ()

    @classmethod
    def from_setting(cls, value: object) -> GoDuration:
        if isinstance(value, bool) or not _GO_DURATION.match(str(value)):
            raise ValueError("must be a duration such as 100ms, 1s or 1m")
        return cls(value)

    def seconds(self) -> float:
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(self))


class RateLimit(Strict, frozen=True):
    interval: GoDuration = GoDuration("0")
    burst: Annotated[int, Meta(ge=0)] = 0

    def seconds(self) -> float:
        return self.interval.seconds()


class WebConfig(Strict, frozen=True):
    tls_server_config: TLSConfig | None = None
    basic_auth_users: dict[str, str] = msgspec.field(default_factory=dict)
    http_server_config: HTTPServerConfig = msgspec.field(default_factory=HTTPServerConfig)
    rate_limit: RateLimit | None = None

    def unenforced(self) -> list[str]:
        """Keys accepted but not acted on, each in words for a WARNING."""
        notes = self.tls_server_config.unenforced() if self.tls_server_config else []
        if self.http_server_config.http2:
            notes.append("http_server_config.http2: not enforced, specwatch serves HTTP/1.1 only")
        return notes


class TokenBucket:
    """exporter-toolkit's rate limit: one request per ``interval``, bursts of ``burst``."""

    def __init__(self, interval: float, burst: int) -> None:
        self._interval = interval
        self._burst = burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._interval)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


@dataclass(frozen=True)
class ActiveWebConfig:
    """One validated file, with what each request and connection needs made once."""

    config: WebConfig
    tls: ssl.SSLContext | None
    users: dict[str, bytes]
    stand_in: bytes
    limiter: TokenBucket | None

    @classmethod
    def of(cls, config: WebConfig, path: Path) -> ActiveWebConfig:
        tls = config.tls_server_config
        users = {u: h.encode() for u, h in config.basic_auth_users.items()}
        rate = config.rate_limit
        limiter = None
        if rate is not None and rate.seconds() > 0:
            limiter = TokenBucket(rate.seconds(), rate.burst)
        context = None if tls is None else _tls_context(path, tls)
        return cls(config, context, users, _stand_in_hash(users.values()), limiter)

    def files(self) -> tuple[Path, ...]:
        tls = self.config.tls_server_config
        return () if tls is None else tls.files()

    def guard(
        self, app: WSGIApp, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        """Rate limit, basic auth and extra headers around one request."""
        headers = list(self.config.http_server_config.headers.items())

        def start(status: str, hdrs: list[tuple[str, str]], *exc: Any) -> Any:
            return start_response(status, hdrs + headers, *exc)

        if self.limiter is not None and not self.limiter.allow():
            start("429 Too Many Requests", [("Content-Type", "text/plain")])
            return [b"too many requests\n"]
        header = environ.get("HTTP_AUTHORIZATION", "")
        if self.users and not _authorised(header, self.users, self.stand_in):
            start(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="specwatch"'), ("Content-Type", "text/plain")],
            )
            return [b"unauthorised\n"]
        return app(environ, start)

    def refusal(self, conn: ssl.SSLSocket) -> str | None:
        tls = self.config.tls_server_config
        return None if tls is None else san_refusal(tls, conn)


def _authorised(header: str, users: dict[str, bytes], stand_in: bytes) -> bool:
    """Whether ``header`` names a user and their password.

    An unknown user is checked against ``stand_in``, a hash of the same cost, so the time an
    answer takes does not tell which users exist.
    """
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    hashed = users.get(user)
    matches = _check(password, stand_in if hashed is None else hashed)
    return matches and hashed is not None


def _stand_in_hash(hashes: Iterable[bytes]) -> bytes:
    """A hash of a random password, at the cost of the first configured hash."""
    first = next(iter(hashes), b"")
    try:
        cost = min(max(int(first.split(b"$")[2]), 4), 16)
    except (IndexError, ValueError):
        cost = 10
    return bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=cost))


# Digests of (password, hash) pairs that passed, never the passwords themselves. Failures are
# not remembered: each guess costs a full check, one at a time.
_passed: set[bytes] = set()
_checking = threading.Lock()
# How long a password check waits for the one in progress, so guesses cannot queue up workers
# (and a stopping server waits for no backlog of them).
CHECK_QUEUE_SECONDS = 0.5


def _check(password: str, hashed: bytes) -> bool:
    """bcrypt is slow on purpose: a scraper's password, once checked, costs a digest lookup
    instead of 100 ms of CPU per scrape; guesses wait for one another, so password guessers
    cost at most one core while scrapers with the right password are answered at once."""
    key = hashlib.sha256(password.encode() + b"\0" + hashed).digest()
    if key in _passed:
        return True
    if not _checking.acquire(timeout=CHECK_QUEUE_SECONDS):
        return False  # too many guesses waiting: refuse this one unchecked
    try:
        matches = bcrypt.checkpw(password.encode(), hashed)
    except ValueError:
        matches = False  # malformed hash in the file, over-long password: never authorise
    finally:
        _checking.release()
    if matches:
        if len(_passed) >= 256:
            _passed.clear()  # bounded even when users rotate passwords often
        _passed.add(key)
    return matches


def load_web_config(path: Path) -> ActiveWebConfig:
    """The validated file, made ready: every problem is a ConfigError naming file and key.

    Relative paths in it are taken from the file's folder, as exporter-toolkit does.
    """
    try:
        config = validate(WebConfig, load_yaml(path, "web config"))
    except Invalid as exc:
        raise ConfigError(f"web config {path}: {exc}") from None
    for user, hashed in config.basic_auth_users.items():
        if not _is_bcrypt(hashed):
            # Accepted, it would answer 401 to everyone and log nothing.
            raise ConfigError(
                f"web config {path}: basic_auth_users.{user}: not a bcrypt hash (give the hash, "
                "e.g. from `htpasswd -nbBC 10 USER PASSWORD`, never the password itself)"
            )
    tls = config.tls_server_config
    if tls is not None:
        config = msgspec.structs.replace(config, tls_server_config=_in_folder(tls, path.parent))
    return ActiveWebConfig.of(config, path)


def _in_folder(tls: TLSConfig, folder: Path) -> TLSConfig:
    update = {
        key: folder / value
        for key in ("cert_file", "key_file", "client_ca_file")
        if (value := getattr(tls, key)) is not None and not value.is_absolute()
    }
    return msgspec.structs.replace(tls, **update)


_BCRYPT_RE = re.compile(r"^\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}$")


def _is_bcrypt(hashed: str) -> bool:
    return bool(_BCRYPT_RE.match(hashed))


def _tls_context(path: Path, tls: TLSConfig) -> ssl.SSLContext:
    """The context, or a ConfigError naming the file and problem (OpenSSL's own message names
    neither the file nor the problem in words).

    Each file is read once, without blocking and only as a regular file, and loaded from
    those bytes: OpenSSL opening the path again would block for good on a FIFO swapped in
    after the check.
    """
    where = f"web config {path}: tls_server_config"
    try:
        check(tls)
    except ConfigError as exc:
        raise ConfigError(f"web config {path}: {exc}") from None
    files: dict[str, bytes] = {}
    for key in ("cert_file", "key_file", "client_ca_file"):
        file = getattr(tls, key)
        if file is None:
            continue
        try:
            files[key] = read_small_file(file, MAX_SETTINGS_BYTES)
        except OSError as exc:
            raise ConfigError(f"{where}.{key}: cannot read {file}: {exc.strerror or exc}") from None
    for key in ("cert_file", "client_ca_file"):
        if key in files:
            _load_certs(f"{where}.{key}: {getattr(tls, key)}", files[key])
    key = f"key_file: {tls.key_file}" if tls.key_file else "key"
    try:
        return build_context(tls, files)
    except EncryptedKey as exc:
        raise ConfigError(f"{where}.{key}: {exc}; give it an unencrypted key") from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            problem = f"does not belong to the certificate in {tls.cert_file or 'cert'}"
        elif exc.reason == "NO_CIPHER_MATCH":
            raise ConfigError(f"{where}.cipher_suites: none usable with this OpenSSL") from None
        else:
            problem = "not a PEM private key"
        raise ConfigError(f"{where}.{key}: {problem}") from None


def _load_certs(where: str, pem: bytes) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(
            cadata=pem.decode(errors="replace")
        )
    except (ssl.SSLError, ValueError):
        raise ConfigError(f"{where}: not a PEM certificate") from None
