"""The agent's transport rule, checked at every start: TLS off loopback, or plaintext on purpose.

The agent can stop and restart the production server, and its bearer token is the only thing
that says who may. On loopback (the demo, tests, an SSH tunnel) nothing crosses a network, so
plain HTTP is fine. On any other address the token would cross the network readable by anyone on
the path, so the agent refuses to start without ``[agent] tls_cert`` and ``tls_key`` unless
``allow_plaintext = true`` says it is meant (a private link, a TLS proxy in front), and then
warns at every start.

:func:`load_server_certificate` checks the PEM pair before anything listens, so a wrong path or
a key that does not belong to the certificate is a one-line error naming the key, not a traceback
from inside uvicorn.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from bot.agent.config import AgentSettings
from bot.agent.tokens import MIN_TOKEN_CHARS
from bot.errors import ConfigError
from bot.tls import fingerprint_of_der, is_loopback

__all__ = [
    "certificate_fingerprint",
    "load_server_certificate",
    "plaintext_refusal",
    "transport_warnings",
]


def plaintext_refusal(settings: AgentSettings) -> str | None:
    """The one-line reason the agent must not start as configured, or None when it may."""
    if settings.tls or settings.allow_plaintext or is_loopback(settings.listen_host):
        return None
    return (
        f"[agent] listen {settings.listen} is not loopback and tls_cert is not set: the bearer "
        "token would cross the network in clear; set tls_cert and tls_key (`kimi-ops agent "
        "gen-cert --out DIR` makes them), or allow_plaintext = true if a private link or a TLS "
        "proxy protects it"
    )


def transport_warnings(settings: AgentSettings) -> list[str]:
    """What the agent logs as warnings at every start about how it is reached: without TLS
    off loopback, a key others can read, a token short enough to guess."""
    warnings: list[str] = []
    if not settings.tls and settings.allow_plaintext and not is_loopback(settings.listen_host):
        warnings.append(
            f"listening on {settings.listen} WITHOUT TLS because [agent] allow_plaintext = true: "
            "anyone on the path can read the bearer token and restart the server"
        )
    if settings.tls_key is not None and settings.tls_key.exists():
        mode = settings.tls_key.stat().st_mode & 0o777
        if mode & 0o077:
            warnings.append(
                f"[agent] tls_key {str(settings.tls_key)!r} is readable by others (mode "
                f"{mode:04o}); chmod 600 it"
            )
    short = settings.tokens.short_entries()
    if short:
        entries = ", ".join(str(n) for n in short)
        warnings.append(
            f"token entr{'y' if len(short) == 1 else 'ies'} {entries} of {settings.token_env} "
            f"{'is' if len(short) == 1 else 'are'} shorter than {MIN_TOKEN_CHARS} characters: "
            "anyone who can reach the agent may guess it; make one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return warnings


def load_server_certificate(settings: AgentSettings) -> str:
    """Check that ``tls_cert`` and ``tls_key`` load as a pair; returns the certificate's
    fingerprint (what the bot pins). A :class:`ConfigError` names the key at fault."""
    if settings.tls_cert is None or settings.tls_key is None:
        raise ConfigError("[agent] tls_cert and tls_key are not both set; TLS needs the pair")
    for key, path in (("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key)):
        if not path.is_file():
            raise ConfigError(f"[agent] {key} {str(path)!r} does not exist or is not a file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"[agent] tls_cert {str(settings.tls_cert)!r} and tls_key "
            f"{str(settings.tls_key)!r} do not load as a PEM certificate and its key: {exc}"
        ) from exc
    return certificate_fingerprint(settings.tls_cert)


def certificate_fingerprint(path: Path) -> str:
    """``sha256:<hex>`` of the first certificate in the PEM file at ``path``."""
    try:
        pem = path.read_text(encoding="ascii")
        begin = pem.index("-----BEGIN CERTIFICATE-----")
        end = pem.index("-----END CERTIFICATE-----", begin) + len("-----END CERTIFICATE-----")
        der = ssl.PEM_cert_to_DER_cert(pem[begin:end])
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{str(path)!r} holds no PEM certificate: {exc}") from exc
    return fingerprint_of_der(der)
