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
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import bcrypt
from pydantic import Field, ValidationError

from exporter.exposition.server import StartResponse, WSGIApp
from exporter.settings import ConfigError, Strict, load_yaml

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
_CLIENT_AUTH: dict[ClientAuth, ssl.VerifyMode] = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


class TLSConfig(Strict):
    cert_file: Path
    key_file: Path
    client_auth_type: ClientAuth = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: Literal["TLS12", "TLS13"] = "TLS12"


class HTTPServerConfig(Strict):
    headers: dict[str, str] = Field(default_factory=dict)


class WebConfig(Strict):
    tls_server_config: TLSConfig | None = None
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    http_server_config: HTTPServerConfig = HTTPServerConfig()

    def tls_context(self) -> ssl.SSLContext | None:
        """Server-side TLS for each connection (the handshake happens in its worker thread)."""
        tls = self.tls_server_config
        if tls is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = _TLS_VERSIONS[tls.min_version]
        context.load_cert_chain(tls.cert_file, tls.key_file)
        context.verify_mode = _CLIENT_AUTH[tls.client_auth_type]
        if tls.client_ca_file:
            context.load_verify_locations(tls.client_ca_file)
        return context

    def guard(self, app: WSGIApp) -> WSGIApp:
        """Basic auth and extra headers around every page but ``/healthz``."""
        headers = list(self.http_server_config.headers.items())
        users = {u: h.encode() for u, h in self.basic_auth_users.items()}
        stand_in = _stand_in_hash(users.values())

        def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            def start(status: str, hdrs: list[tuple[str, str]], *exc: Any) -> Any:
                return start_response(status, hdrs + headers, *exc)

            header = environ.get("HTTP_AUTHORIZATION", "")
            if users and not _authorised(header, users, stand_in):
                start(
                    "401 Unauthorized",
                    [
                        ("WWW-Authenticate", 'Basic realm="specwatch"'),
                        ("Content-Type", "text/plain"),
                    ],
                )
                return [b"unauthorised\n"]
            return app(environ, start)

        return guarded


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


def load_web_config(path: Path) -> WebConfig:
    """The validated file: every problem stops the start with the file and key named."""
    try:
        config = WebConfig.model_validate(load_yaml(path, "web config"))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: "
            + ("unknown key" if err["type"] == "extra_forbidden" else err["msg"])
            for err in exc.errors()
        )
        raise ConfigError(f"web config {path}: {problems}") from None
    for user, hashed in config.basic_auth_users.items():
        if not _is_bcrypt(hashed):
            # Accepted, it would answer 401 to everyone and log nothing.
            raise ConfigError(
                f"web config {path}: basic_auth_users.{user}: not a bcrypt hash (give the hash, "
                "e.g. from `htpasswd -nbBC 10 USER PASSWORD`, never the password itself)"
            )
    if config.tls_server_config is not None:
        _check_tls(path, config.tls_server_config)
    return config


_BCRYPT_RE = re.compile(r"^\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}$")


def _is_bcrypt(hashed: str) -> bool:
    return bool(_BCRYPT_RE.match(hashed))


def _check_tls(path: Path, tls: TLSConfig) -> None:
    """Load each file once at start, so a bad one is named here rather than at first use
    (where OpenSSL's message names neither the file nor the problem in words)."""
    for key in ("cert_file", "key_file", "client_ca_file"):
        file = getattr(tls, key)
        if file is None:
            continue
        try:
            file.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"web config {path}: tls_server_config.{key}: cannot read {file}: "
                f"{exc.strerror or exc}"
            ) from None
    where = f"web config {path}: tls_server_config"
    _load_certs(f"{where}.cert_file", tls.cert_file)
    if tls.client_ca_file is not None:
        _load_certs(f"{where}.client_ca_file", tls.client_ca_file)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            problem = f"does not belong to the certificate in {tls.cert_file}"
        else:
            problem = "not a PEM private key (or one protected by a passphrase)"
        raise ConfigError(f"{where}.key_file: {tls.key_file}: {problem}") from None


def _load_certs(where: str, file: Path) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(file)
    except ssl.SSLError:
        raise ConfigError(f"{where}: {file}: not a PEM certificate") from None
