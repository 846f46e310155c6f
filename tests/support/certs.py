"""Certificates made with the real ``openssl`` for TLS tests: self-signed, or signed by a CA."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.tools import require_tool

Pair = tuple[Path, Path]  # certificate, key
# EC keys: quick to make, and a certificate a client can pick ECDSA suites for.
_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str) -> None:
    subprocess.run([require_tool("openssl"), *args], check=True, capture_output=True, timeout=60)


def _san(sans: Sequence[str]) -> tuple[str, ...]:
    return ("-addext", "subjectAltName=" + ",".join(sans)) if sans else ()


def self_signed(folder: Path, name: str, sans: Sequence[str] = ()) -> Pair:
    """A certificate for ``CN=name`` signed by its own key; ``sans`` like ``DNS:x``, ``IP:::1``."""
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl(
        "req", "-x509", *_NEW_KEY, "-days", "1", "-subj", f"/CN={name}", *_san(sans),
        "-keyout", str(key), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def signed_by(ca: Pair, folder: Path, name: str, sans: Sequence[str] = ()) -> Pair:
    """A certificate for ``CN=name`` issued by ``ca`` (a pair from ``self_signed``)."""
    cert, key, request = folder / f"{name}.crt", folder / f"{name}.key", folder / f"{name}.csr"
    _openssl(
        "req", "-new", *_NEW_KEY, "-subj", f"/CN={name}", *_san(sans),
        "-keyout", str(key), "-out", str(request),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-days", "1", "-copy_extensions", "copyall", "-out", str(cert),
    )  # fmt: skip
    return cert, key


def encrypted(pair: Pair, passphrase: str = "secret") -> Pair:
    """``pair`` with its key protected by ``passphrase``, as ``openssl req`` without ``-nodes``
    writes it; the key is a new file beside the old."""
    cert, key = pair
    protected = key.with_suffix(".encrypted.key")
    _openssl(
        "pkey", "-in", str(key), "-aes256", "-passout", f"pass:{passphrase}", "-out", str(protected)
    )
    return cert, protected
