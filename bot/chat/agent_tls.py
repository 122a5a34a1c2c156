"""How the bot checks the agent it talks to: the TLS context for one ``[hosts.NAME]``.

Four ways, one per host, chosen by its settings:

- ``fingerprint = "sha256:..."``: pinned. The agent's certificate (self-signed by
  ``kimi-ops agent gen-cert``) must be exactly that one; no CA and no host name is consulted.
  The check runs inside the TLS handshake, so a wrong certificate ends the connection before the
  request, and its bearer token, is written to it.
- ``ca_file = "/etc/kimi-ops/ca.pem"``: the certificate must chain to that bundle and name the
  URL's host (ordinary HTTPS against a private CA).
- neither: ordinary HTTPS against the system's trust store (httpx's default).
- ``insecure = true``: no check at all, for tests only; the settings log a warning at load.

A certificate refused either way raises :class:`~bot.errors.AgentCertificateError` from the
client, naming the host (and, pinned, both fingerprints' first digits).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import ConfigError
from bot.tls import fingerprint_of_der

__all__ = ["PinMismatch", "TlsPolicy", "client_context", "find_certificate_error"]


@dataclass(frozen=True)
class TlsPolicy:
    """How one host's certificate is checked (``HostSettings.tls``); at most one of ``ca_file``,
    ``fingerprint`` and ``insecure`` is set (the settings refuse more)."""

    ca_file: Path | None = None
    fingerprint: str | None = None
    insecure: bool = False


class PinMismatch(ssl.SSLCertVerificationError):
    """The agent presented a certificate other than the pinned one (raised in the handshake)."""

    def __init__(self, expected: str, presented: str) -> None:
        super().__init__(f"certificate {presented} is not the pinned {expected}")
        self.expected = expected
        self.presented = presented


class _PinnedContext(ssl.SSLContext):
    """A client context whose sockets compare the peer's certificate with ``pinned``."""

    pinned: str


class _PinnedSocket(ssl.SSLSocket):
    """Checks the pin right after the handshake: ``wrap_socket`` runs the handshake before it
    returns, so httpx never gets a socket to write the request to when the pin fails."""

    def do_handshake(self, block: bool = False) -> None:
        super().do_handshake(block)
        context = self.context
        assert isinstance(context, _PinnedContext)
        der = self.getpeercert(binary_form=True)
        presented = fingerprint_of_der(der) if der else "no certificate"
        if presented != context.pinned:
            raise PinMismatch(context.pinned, presented)


def client_context(policy: TlsPolicy, where: str) -> ssl.SSLContext | bool:
    """What ``httpx.Client(verify=...)`` takes for ``policy``; ``where`` (``[hosts.NAME]``)
    names the setting in a :class:`ConfigError` when ``ca_file`` cannot be loaded."""
    if policy.fingerprint is not None:
        pinned = _PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
        # The pin is the whole identity: a self-signed certificate has no CA to chain to.
        pinned.check_hostname = False
        pinned.verify_mode = ssl.CERT_NONE
        pinned.minimum_version = ssl.TLSVersion.TLSv1_2
        pinned.pinned = policy.fingerprint
        pinned.sslsocket_class = _PinnedSocket
        return pinned
    if policy.ca_file is not None:
        try:
            return ssl.create_default_context(cafile=str(policy.ca_file))
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{where} ca_file {str(policy.ca_file)!r} cannot be loaded as PEM: {exc}"
            ) from exc
    if policy.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return True


def find_certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate refusal behind an httpx error, if that is what it was."""
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return cause
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: Any = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
