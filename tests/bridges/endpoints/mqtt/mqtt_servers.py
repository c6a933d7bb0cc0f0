"""Mosquitto for the mqtt endpoint tests: the project's broker, or a private one we may restart.

The shared broker is the one ``scripts/brokers up mosquitto`` starts on 1883
(user guest/guest; ``TRIO_STOMP_MQTT_URL`` points elsewhere). When it does
not answer, tests skip, or fail under ``STOMP_REQUIRE_BROKERS=1``. Tests that
restart the broker, or need an ACL and a packet-size limit, run their own
``mosquitto`` on a free port (persistence on, so sessions survive a restart).
What every family shares is in ``tests/family_kit.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import trustme
from family_kit import (
    PrivateServer,
    free_port,
    host_port,
    private_server,
    require_programs,
    require_server,
)

MQTT_URL = os.environ.get("TRIO_STOMP_MQTT_URL", "mqtt://127.0.0.1:1883")
HOSTPORT = host_port(MQTT_URL)
USER, PASSWORD = "guest", "guest"
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
#: The private broker refuses PUBLISH packets larger than this.
PRIVATE_MAX_PACKET = 10_000


def _probe(host: str, port: int) -> str | None:
    # MQTT 3.1.1 CONNECT, clean session, client id "probe", guest/guest.
    payload = b"\x00\x04MQTT\x04\xc2\x00\x05" + b"\x00\x05probe" + b"\x00\x05guest" * 2
    packet = bytes([0x10, len(payload)]) + payload
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(packet)
            reply = sock.recv(4)
            sock.sendall(b"\xe0\x00")
    except OSError as exc:
        return f"mosquitto is not running on {host}:{port} ({exc}); `scripts/brokers up`"
    if reply[:1] == b"\x20":
        return None
    return f"{host}:{port} answered {reply!r} to CONNECT"


def require_mqtt() -> str:
    """The shared broker's URL; skip (locally) or fail (CI) when it is not up."""
    return require_server(MQTT_URL, 1883, _probe)


class PrivateMosquitto(PrivateServer):
    """A mosquitto of our own: guest/guest, ACL ``allowed/#`` only, persistence, small packets."""

    programs = (MOSQUITTO, MOSQUITTO_PASSWD)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.url = f"mqtt://127.0.0.1:{self.port}"
        #: A TLS listener (certificate for 127.0.0.1 and localhost from a private CA).
        self.tls_port = free_port()
        self.tls_url = f"mqtts://localhost:{self.tls_port}"
        self.ca_file = directory / "ca.pem"

    def probe(self, host: str, port: int) -> str | None:
        return _probe(host, port)

    def _write_config(self) -> Path:
        directory = self.directory
        subprocess.run(
            [MOSQUITTO_PASSWD, "-c", "-b", str(directory / "passwd"), USER, PASSWORD], check=True
        )
        (directory / "acl").write_text(f"user {USER}\ntopic readwrite allowed/#\n")
        authority = trustme.CA()
        authority.cert_pem.write_to_path(str(self.ca_file))
        issued = authority.issue_cert("localhost", "127.0.0.1")
        issued.private_key_pem.write_to_path(str(directory / "key.pem"))
        issued.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
        # As root, mosquitto would switch to its own user, which cannot read the
        # test's private temporary directory.
        as_root = "user root\n" if os.geteuid() == 0 else ""
        config = directory / "mosquitto.conf"
        config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous false\n"
            f"password_file {directory / 'passwd'}\n"
            f"acl_file {directory / 'acl'}\n"
            "persistence true\n"
            f"persistence_location {directory}/\n"
            "max_inflight_messages 0\n"
            "max_queued_messages 0\n"
            f"max_packet_size {PRIVATE_MAX_PACKET}\n"
            f"{as_root}"
            f"listener {self.tls_port} 127.0.0.1\n"
            f"certfile {directory / 'cert.pem'}\n"
            f"keyfile {directory / 'key.pem'}\n"
        )
        return config

    def command(self) -> list[str]:
        # SIGTERM on stop: mosquitto saves its sessions and exits.
        config = self.directory / "mosquitto.conf"
        if not config.exists():
            config = self._write_config()
        return [MOSQUITTO, "-c", str(config)]


def private_mosquitto_available() -> None:
    """Skip (locally) or fail (CI) when mosquitto is not installed."""
    require_programs(*PrivateMosquitto.programs)


def private_mosquitto(directory: Path) -> AbstractAsyncContextManager[PrivateMosquitto]:
    """A private broker for one test, stopped (and reaped) when the block ends."""
    return private_server(PrivateMosquitto, directory)
