"""The TLS half of the web config, with the meaning Go's crypto/tls gives each setting.

Scrapers are configured against Go exporters, so a value must do here what it does there:
``RequireAnyClientCert`` requires a certificate and does not verify it, a cipher suite is named
as Go names it, and ``client_allowed_sans`` matches a SAN exactly. What OpenSSL cannot be told
through Python's ``ssl`` (curve preferences) is accepted and named as not enforced.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import msgspec

from exporter.settings import ConfigError, Strict

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "RequireClientCert",  # exporter-toolkit's older name for RequireAnyClientCert
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
Curve = Literal["CurveP256", "CurveP384", "CurveP521", "X25519"]
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's names of the suites tls.CipherSuites() offers, with OpenSSL's name. Go ignores the list
# for TLS 1.3 (its suites are not configurable), so those map to None here too.
GO_CIPHERS: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# The SAN kinds Go compares client_allowed_sans with, as Python's getpeercert() names them.
_SAN_KINDS = frozenset({"DNS", "IP Address", "email", "URI"})
_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


class Secret:
    """Text that is never shown: an inline private key stays out of every repr and log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    @classmethod
    def from_setting(cls, value: object) -> Secret:
        if not isinstance(value, str):
            raise TypeError("must be text")
        return cls(value)

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class TLSConfig(Strict, frozen=True):
    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None  # inline PEM; cert_file wins when both are given, as in Go
    key: Secret | None = None
    client_ca: str | None = None
    client_ca_file: Path | None = None
    client_auth_type: ClientAuth = "NoClientCert"
    client_allowed_sans: list[str] | None = None
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName = "TLS13"
    cipher_suites: list[str] = msgspec.field(default_factory=list)
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[Curve] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        for name in self.cipher_suites:
            if name not in GO_CIPHERS:
                raise ValueError(
                    f"cipher_suites: unknown cipher: {name} (Go's names, e.g. "
                    f"{next(iter(GO_CIPHERS))})"
                )

    def files(self) -> tuple[Path, ...]:
        """The files this config reads, whose change means reading it again."""
        named = (self.cert_file, self.key_file, self.client_ca_file)
        return tuple(path for path in named if path is not None)

    def unenforced(self) -> list[str]:
        """What this config asks for that is accepted but not done, in words for a WARNING."""
        notes = []
        if self.curve_preferences:
            notes.append(
                "tls_server_config.curve_preferences: not enforced, OpenSSL's default groups apply"
            )
        if self.cert_file is not None and self.cert is not None:
            notes.append("tls_server_config.cert: ignored, cert_file is used")
        if self.key_file is not None and self.key is not None:
            notes.append("tls_server_config.key: ignored, key_file is used")
        return notes


def check(tls: TLSConfig) -> None:
    """The combinations Go's exporter-toolkit refuses, refused the same way."""
    if tls.cert_file is None and tls.cert is None:
        raise ConfigError("tls_server_config: missing one of cert or cert_file")
    if tls.key_file is None and tls.key is None:
        raise ConfigError("tls_server_config: missing one of key or key_file")
    has_ca = tls.client_ca_file is not None or tls.client_ca is not None
    if has_ca and tls.client_auth_type == "NoClientCert":
        raise ConfigError(
            "tls_server_config.client_ca_file: a client CA without a client_auth_type"
        )
    required = ("RequireAnyClientCert", "RequireClientCert", "RequireAndVerifyClientCert")
    if tls.client_allowed_sans is not None and tls.client_auth_type not in required:
        raise ConfigError(
            "tls_server_config.client_allowed_sans: needs client_auth_type "
            "RequireAnyClientCert or RequireAndVerifyClientCert"
        )
    if _VERSIONS[tls.min_version] > _VERSIONS[tls.max_version]:
        raise ConfigError("tls_server_config.min_version: above max_version")


class EncryptedKey(ValueError):
    """The private key is protected by a passphrase, which specwatch never asks for."""


def _no_passphrase() -> bytes:
    """OpenSSL's own prompt would read a passphrase from the terminal or standard input: it
    hung the start (``Enter PEM pass phrase:``) and took a log line read from ``--log-file -``
    as one."""
    raise EncryptedKey("protected by a passphrase (specwatch never asks for one)")


def build_context(tls: TLSConfig, files: Mapping[str, bytes]) -> ssl.SSLContext:
    """A server context for ``tls``; raises ssl.SSLError, ValueError or EncryptedKey for the
    caller to name.

    ``files`` holds the bytes of each file ``tls`` names (by key: ``cert_file``...), read once
    by the caller: no path is opened here, so a file swapped for a FIFO after it was checked
    cannot block the loading for good.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    context.maximum_version = _VERSIONS[tls.max_version]
    cert = files["cert_file"] if tls.cert_file is not None else (tls.cert or "").encode()
    key = files["key_file"] if tls.key_file is not None else (_secret(tls.key) or "").encode()
    with _in_memory(cert) as cert_path, _in_memory(key) as key_path:
        context.load_cert_chain(cert_path, key_path, password=_no_passphrase)
    suites = [GO_CIPHERS[name] for name in tls.cipher_suites]
    if any(suites):
        context.set_ciphers(":".join(s for s in suites if s))
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.client_ca_file is not None:
        context.load_verify_locations(cadata=files["client_ca_file"].decode(errors="replace"))
    elif tls.client_ca is not None:
        context.load_verify_locations(cadata=tls.client_ca)
    elif tls.client_auth_type != "NoClientCert":
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Go: the system roots
    if tls.client_auth_type in _VERIFY_MODES:
        context.verify_mode = _VERIFY_MODES[tls.client_auth_type]
    else:
        _skip_verification(context, require=tls.client_auth_type != "RequestClientCert")
    return context


def san_refusal(tls: TLSConfig, conn: ssl.SSLSocket) -> str | None:
    """Why a handshaken connection may not go on under ``client_allowed_sans``, or None."""
    if tls.client_allowed_sans is None:
        return None
    peer = conn.getpeercert()
    if not peer:
        return "no client certificate to match against client_allowed_sans"
    entries = peer.get("subjectAltName", ())
    names = {_san_text(*entry) for entry in entries if isinstance(entry, tuple) and len(entry) == 2}
    if names & set(tls.client_allowed_sans):
        return None
    return "no subject alternative name of the client certificate is in client_allowed_sans"


def _san_text(kind: object, value: object) -> str | None:
    """A SAN as Go prints it: IP addresses in their short form, the rest as written."""
    if kind not in _SAN_KINDS or not isinstance(value, str):
        return None
    if kind == "IP Address":
        with contextlib.suppress(ValueError):
            return str(ipaddress.ip_address(value.strip()))
    return value


def _secret(value: Secret | None) -> str | None:
    return None if value is None else value.get_secret_value()


@contextlib.contextmanager
def _in_memory(pem: bytes) -> Iterator[str]:
    """A path OpenSSL can load ``pem`` from: an anonymous memory file, so a private key never
    touches a disk (the root filesystem may be read-only) and no operator's path is opened."""
    fd = os.memfd_create("specwatch-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


# OpenSSL's verify-mode bits (ssl.h), and a verify callback that accepts every certificate:
# Go's RequestClientCert and RequireAnyClientCert ask for a certificate without verifying it,
# which Python's ssl module cannot express, so the callback is set on its OpenSSL context.
_SSL_VERIFY_PEER = 0x01
_SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x02
_VerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_ACCEPT_ANY = _VerifyCallback(lambda _preverified, _store: 1)


def _skip_verification(context: ssl.SSLContext, require: bool) -> None:
    lib = _libssl()
    lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    lib.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VerifyCallback]
    lib.SSL_CTX_set_verify.restype = None
    # CPython keeps the SSL_CTX pointer first after the object header; the pointer is checked
    # by reading back two verify modes set through Python before anything is written with it.
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    readings = []
    for mode in (ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED):
        context.verify_mode = mode
        readings.append(lib.SSL_CTX_get_verify_mode(pointer))
    expected = [_SSL_VERIFY_PEER, _SSL_VERIFY_PEER | _SSL_VERIFY_FAIL_IF_NO_PEER_CERT]
    if readings != expected:
        raise ConfigError(
            "tls_server_config.client_auth_type: this Python's ssl module cannot request a "
            "certificate without verifying it; use VerifyClientCertIfGiven or "
            "RequireAndVerifyClientCert"
        )
    bits = _SSL_VERIFY_PEER | (_SSL_VERIFY_FAIL_IF_NO_PEER_CERT if require else 0)
    lib.SSL_CTX_set_verify(pointer, bits, _ACCEPT_ANY)


def _libssl() -> ctypes.CDLL:
    """The libssl the ssl module is linked to (already loaded; found in the process's maps)."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if "/libssl.so" in path:
                return ctypes.CDLL(path)
    raise ConfigError(
        "tls_server_config.client_auth_type: no shared libssl in this process to request a "
        "certificate without verifying it; use VerifyClientCertIfGiven or "
        "RequireAndVerifyClientCert"
    )
