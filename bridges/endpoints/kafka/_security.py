"""TLS and SASL for both ``kafka`` endpoints: settings, their checks, librdkafka's names for them.

The keys follow Kafka's own (``security.protocol``, ``sasl.mechanism``...)
with ``_`` for ``.``, and the project's ``_file`` for paths: a user of
Kafka's tools recognises them, a user of the other families finds the
secrets where they are elsewhere (``sasl_password`` and ``ssl_key_password``
are secret fields: ``${ENV}``, ``${credential:NAME}`` or ``NAME_file``,
redacted from everything the process says, never in ``repr``).

Checked when the endpoint is built, all problems together (so ``bridges
check`` names each): a TLS file without TLS, a SASL setting without SASL, a
mechanism without its username and password, a certificate without its
key; under ``bridges check`` each file is also read (a CA bundle must load
as one). No I/O otherwise: librdkafka reads the files itself when it connects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import attrs

from bridges import Context, InvalidSetting, InvalidSettings
from bridges._readfile import check_file, checked_cafile

from ._connection import KafkaConnection

_TLS = ("ssl", "sasl_ssl")
_SASL = ("sasl_plaintext", "sasl_ssl")


@attrs.frozen
class KafkaSecurity(KafkaConnection):
    """Connection settings with TLS and SASL (both ``kafka`` endpoints).

    Attributes:
      security_protocol: ``"plaintext"`` (the default), ``"ssl"`` (TLS),
        ``"sasl_plaintext"`` (SASL, no TLS: the traffic in clear) or
        ``"sasl_ssl"`` (SASL over TLS): Kafka's ``security.protocol``.
      ssl_ca_file: with TLS: trust the CAs in this file (PEM) instead of the
        system's (``ssl.ca.location``).
      ssl_cert_file: with TLS: the client's certificate (PEM), for brokers
        that ask for one (``ssl.certificate.location``); needs ``ssl_key_file``.
      ssl_key_file: the client certificate's private key (PEM) (``ssl.key.location``).
      ssl_key_password: the key's password, when it is encrypted (a secret:
        or ``ssl_key_password_file``).
      ssl_check_hostname: with TLS: the broker's certificate must name the
        host it was reached by (``ssl.endpoint.identification.algorithm =
        https``); false checks only that a trusted CA signed it.
      sasl_mechanism: with SASL: ``"PLAIN"``, ``"SCRAM-SHA-256"`` or
        ``"SCRAM-SHA-512"`` (``sasl.mechanism``).
      sasl_username: with SASL: the user.
      sasl_password: with SASL: the password (a secret: or ``sasl_password_file``).
    """

    security_protocol: Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"] = "plaintext"
    ssl_ca_file: str | None = None
    ssl_cert_file: str | None = None
    ssl_key_file: str | None = None
    ssl_key_password: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    ssl_check_hostname: bool = True
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)


def security_settings(config: KafkaSecurity, context: Context) -> dict[str, Any]:
    """librdkafka's settings for ``config``'s TLS and SASL, every problem checked first.

    Raises:
      InvalidSetting: one problem (named by its key); InvalidSettings: several.
    """
    found: list[InvalidSetting] = []
    paths = _tls_files(config, context, found)
    _check_sasl(config, found)
    InvalidSettings.raise_any(found)
    protocol = config.security_protocol
    settings: dict[str, Any] = {"security.protocol": protocol}
    if protocol in _TLS:
        settings |= {_LIBRDKAFKA[key]: str(path) for key, path in paths.items()}
        if config.ssl_key_password is not None:
            settings["ssl.key.password"] = config.ssl_key_password
        settings["ssl.endpoint.identification.algorithm"] = (
            "https" if config.ssl_check_hostname else "none"
        )
    if protocol in _SASL:
        settings["sasl.mechanism"] = config.sasl_mechanism
        settings["sasl.username"] = config.sasl_username
        settings["sasl.password"] = config.sasl_password
    return settings


#: The file settings and librdkafka's names for them.
_LIBRDKAFKA = {
    "ssl_ca_file": "ssl.ca.location",
    "ssl_cert_file": "ssl.certificate.location",
    "ssl_key_file": "ssl.key.location",
}


def _tls_files(
    config: KafkaSecurity, context: Context, found: list[InvalidSetting]
) -> dict[str, Path]:
    """The TLS files given, checked (read under ``bridges check``); problems into ``found``."""
    protocol = config.security_protocol
    tls = protocol in _TLS
    files = {key: getattr(config, key) for key in _LIBRDKAFKA}
    for key, value in [*files.items(), ("ssl_key_password", config.ssl_key_password)]:
        if value is not None and not tls:
            why = f'needs security_protocol = "ssl" or "sasl_ssl" (it is "{protocol}")'
            found.append(InvalidSetting(key, why))
    if (config.ssl_cert_file is None) != (config.ssl_key_file is None):
        found.append(
            InvalidSetting("ssl_cert_file", "give ssl_cert_file and ssl_key_file together")
        )
    if config.ssl_key_password is not None and config.ssl_key_file is None:
        found.append(InvalidSetting("ssl_key_password", "needs ssl_key_file"))
    if not config.ssl_check_hostname and not tls:
        found.append(InvalidSetting("ssl_check_hostname", "means nothing without TLS"))
    paths: dict[str, Path] = {}
    for key, value in files.items():
        if value is None or not tls:
            continue
        try:
            if key == "ssl_ca_file":  # (a CA bundle must load as one)
                paths[key] = checked_cafile(key, value, context) or context.path(value)
            else:
                paths[key] = context.path(value)
                check_file(key, paths[key], context)
        except InvalidSetting as exc:
            found.append(exc)
    return paths


def _check_sasl(config: KafkaSecurity, found: list[InvalidSetting]) -> None:
    """SASL's settings, all there with SASL and none without; problems into ``found``."""
    protocol = config.security_protocol
    sasl = protocol in _SASL
    for key in ("sasl_mechanism", "sasl_username", "sasl_password"):
        value = getattr(config, key)
        if sasl and value is None:
            found.append(InvalidSetting(key, f'missing: security_protocol = "{protocol}" needs it'))
        elif not sasl and value is not None:
            why = f'needs security_protocol = "sasl_ssl" or "sasl_plaintext" (it is "{protocol}")'
            found.append(InvalidSetting(key, why))
    if sasl and config.sasl_username == "":
        found.append(InvalidSetting("sasl_username", "must not be empty"))
