"""TLS to Redis: the four COGWORKER_REDIS_SSL_* settings, checked at start and turned into the
options every Redis client cogworker builds gets (store/connection.py, the supervisor's metrics scrape).

Checked at start because a missing CA file or a key that doesn't match its certificate would
otherwise show up only at each connection, as an outage that never ends. The messages name the
setting and the file, never the URL: that may hold the password.

Standard library only, like redact.py: the settings (pydantic) and the supervisor's metrics scrape both
build on it, and the supervisor's SwarmConfig carries the same four fields (TlsSettings).
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Protocol

from cogworker.cluster_url import tls_scheme


class TlsSettings(Protocol):
    """What these functions read: cogworker's Settings and the supervisor's SwarmConfig both have it."""

    @property
    def redis_url(self) -> str: ...
    @property
    def redis_ssl_ca_file(self) -> str: ...
    @property
    def redis_ssl_cert_file(self) -> str: ...
    @property
    def redis_ssl_key_file(self) -> str: ...
    @property
    def redis_ssl_check_hostname(self) -> bool: ...


def readable(path: str) -> str:
    """`path` when it is a file this process can read, else ValueError saying what is wrong."""
    if not os.path.exists(path):
        raise ValueError("no such file")
    if not os.path.isfile(path):
        raise ValueError("is not a file")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ValueError(f"can't read it ({exc.strerror or exc})") from None
    return path


def _no_passphrase() -> str:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key, and hang a
    # service. An empty passphrase fails at once, and the message says why.
    return ""


def check_together(settings: TlsSettings) -> None:
    """The checks across the TLS settings and the URL; ValueError names the variables."""
    ca, cert, key = settings.redis_ssl_ca_file, settings.redis_ssl_cert_file, settings.redis_ssl_key_file
    if bool(cert) != bool(key):
        raise ValueError(
            "set both COGWORKER_REDIS_SSL_CERT_FILE and COGWORKER_REDIS_SSL_KEY_FILE (a client "
            "certificate and its private key), or neither"
        )
    if (ca or cert) and not tls_scheme(settings.redis_url):
        # Else the files would be ignored and the password sent in clear.
        raise ValueError(
            "COGWORKER_REDIS_SSL_CA_FILE, _CERT_FILE and _KEY_FILE need a rediss:// (or rediss+cluster://) "
            "COGWORKER_REDIS_URL (redis:// and unix:// are not TLS)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca:
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ValueError(
                f"COGWORKER_REDIS_SSL_CA_FILE={ca!r}: holds no PEM certificate ({exc})"
            ) from None
    if cert:
        try:
            context.load_cert_chain(cert, key, password=_no_passphrase)
        except ssl.SSLError as exc:
            raise ValueError(
                f"COGWORKER_REDIS_SSL_CERT_FILE={cert!r} and COGWORKER_REDIS_SSL_KEY_FILE={key!r}: not a "
                f"PEM certificate and its unencrypted private key ({exc.reason or exc})"
            ) from None


def client_options(settings: TlsSettings) -> dict[str, Any]:
    """redis-py's ssl_* options for a `rediss://` (or `rediss+cluster://`) URL; nothing for another
    scheme (redis-py would refuse them there, and check_together already refused TLS files with one)."""
    if not tls_scheme(settings.redis_url):
        return {}
    return {
        "ssl_ca_certs": settings.redis_ssl_ca_file or None,
        "ssl_certfile": settings.redis_ssl_cert_file or None,
        "ssl_keyfile": settings.redis_ssl_key_file or None,
        "ssl_check_hostname": settings.redis_ssl_check_hostname,
        "ssl_cert_reqs": "required",
    }
