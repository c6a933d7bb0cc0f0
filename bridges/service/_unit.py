"""``bridges unit``: the systemd template unit ``bridges@.service`` for this install.

The unit runs ``/etc/bridges/NAME.toml`` as ``bridges@NAME``: a ``Type=notify``
service with a watchdog, reload on SIGHUP (``bridges reload --wait``, so that a
refused config fails ``systemctl reload``), credentials, a state directory and
systemd's hardening. ``bridges unit --paths CONFIG`` prints the drop-in that
lets one instance write the config's paths outside its state directory.
Its commands name the ``bridges`` program of the install that prints it
(``/opt/bridges/bin/bridges`` for the documented venv), so the unit cannot
run a different copy than the one that wrote it.
``examples/systemd/bridges@.service`` is this text for ``/opt/bridges``; a test
keeps the two the same.

Credentials: the unit loads the directory ``/etc/bridges/credentials/NAME/``
as ``LoadCredential=bridges:DIR``. systemd 252 (Debian bookworm) names each of
its files ``bridges_FILE`` in ``$CREDENTIALS_DIRECTORY`` (systemd.exec(5)), and
``${credential:FILE}`` in the config finds it by that name (see
``bridges._convert.read_credential``). A new secret is a new file: the unit
does not change, and the same config works under any instance name.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .._registry import Registry

#: Where the documented install puts the ``bridges`` program (a venv under /opt/bridges).
DEFAULT_PROGRAM: Final = "/opt/bridges/bin/bridges"

_TEMPLATE: Final = """\
# bridges@NAME runs /etc/bridges/NAME.toml as a hardened notify service.
#
#   python3 -m venv /opt/bridges                   # the install this unit runs
#   /opt/bridges/bin/pip install '.[bridges]'      # in a clone of trio-stomp
#   /opt/bridges/bin/bridges unit > /etc/systemd/system/bridges@.service
#   install -d -m 0700 /etc/bridges/credentials/orders
#   systemctl enable --now bridges@orders          # runs /etc/bridges/orders.toml
#   systemctl reload bridges@orders                # re-read the config, no loss; fails if refused
#   systemctl status bridges@orders                # STATUS=: routes running/retrying
#   journalctl -u bridges@orders                   # logs, with their priorities
#
# Secrets: one file each in /etc/bridges/credentials/NAME/ (directory 0700,
# files 0600, owned by root), written ${{credential:FILE}} in the config (e.g.
# passcode = "${{credential:broker-pass}}"). systemd copies them to
# $CREDENTIALS_DIRECTORY as bridges_FILE, readable by this service alone, and
# bridges finds them by either name. The directory must exist (it may be empty).

[Unit]
Description=bridges: message routes of /etc/bridges/%i.toml
Documentation=https://github.com/trio-stomp/trio-stomp/blob/main/README.md
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStartPre={program} check /etc/bridges/%i.toml
ExecStart={program} run /etc/bridges/%i.toml
# SIGHUP, then wait for the outcome: a config the process refuses fails
# `systemctl reload` (exit 2) instead of showing as "Reloaded". The outcome
# comes through $RUNTIME_DIRECTORY/reload (RuntimeDirectory= below).
ExecReload={program} reload --wait $MAINPID
# READY=1 comes once every route is open or retrying; a wedged process (a
# route stuck with messages in flight for [bridge] stall_timeout, or a
# blocked event loop) stops feeding the watchdog and is restarted.
TimeoutStartSec=60
WatchdogSec=30
Restart=on-failure
RestartSec=2
# Exit 2: the config cannot be used (ExecStartPre's check says why in the
# journal): restarting would only fail again every RestartSec.
RestartPreventExitStatus=2
# SIGTERM: finish in-flight messages within [bridge] shutdown_timeout (10 s by
# default); then systemd's own stop timeout. Exit 3 (messages handed back or
# kept in the store) is a clean stop for systemd.
KillSignal=SIGTERM
TimeoutStopSec=30
SuccessExitStatus=3
LoadCredential=bridges:/etc/bridges/credentials/%i
# Relative paths in the config (file endpoints, [broker] data_dir) are under
# the state directory: /var/lib/bridges/%i. Everything else is read-only
# (ProtectSystem=strict): `bridges unit --paths /etc/bridges/NAME.toml` prints
# the drop-in (ReadWritePaths=) for a config's paths outside it, and
# `bridges check` (ExecStartPre) refuses a path on a read-only file system.
StateDirectory=bridges/%i
StateDirectoryMode=0700
RuntimeDirectory=bridges/%i
RuntimeDirectoryMode=0700
WorkingDirectory=%S/bridges/%i
DynamicUser=yes
UMask=0077

# Hardening (systemd-analyze security bridges@orders).
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
NoNewPrivileges=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
# (no MemoryDenyWriteExecute=: libffi closures, used by some client libraries, need it off)
RemoveIPC=yes
CapabilityBoundingSet=
AmbientCapabilities=
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
"""


class UnitError(Exception):
    """The unit cannot be written for this install (the message says why)."""


def render_unit(program: str = DEFAULT_PROGRAM) -> str:
    """The text of ``bridges@.service`` whose commands run ``program``.

    Raises:
      UnitError: ``program`` is not an absolute path systemd can run as written.
    """
    if not os.path.isabs(program) or any(c.isspace() or c in "%$\\\"'" for c in program):
        raise UnitError(f"{program!r}: not an absolute path without spaces, quotes, % or $")
    return _TEMPLATE.format(program=program)


def installed_program() -> str:
    """The ``bridges`` program of the running install: its scripts directory's ``bridges``.

    In a venv (``/opt/bridges``) that is ``/opt/bridges/bin/bridges``; with
    pipx, the program in pipx's venv; for a ``pip install`` into the system's
    Python, the scheme's scripts directory (``/usr/local/bin`` on Debian).

    Raises:
      UnitError: there is no such program (bridges is not installed as a
        package here, e.g. run from a source tree with ``python -m``).
    """
    program = Path(sysconfig.get_path("scripts")) / "bridges"
    if not program.is_file():
        raise UnitError(
            f"no bridges program in {program.parent} (the scripts of {sys.prefix}): "
            "install the package (pip install 'trio-stomp[bridges]') and run its bridges"
        )
    return str(program)


def print_unit(say: Callable[[str], None]) -> int:
    """``bridges unit``: print the unit for this install; the exit status (1: none)."""
    try:
        text = render_unit(installed_program())
    except UnitError as exc:
        say(str(exc))
        return 1
    sys.stdout.write(text)
    return 0


#: The state directory of ``bridges@NAME`` (``StateDirectory=bridges/%i``).
STATE_ROOT: Final = Path("/var/lib/bridges")


def render_paths(config_file: str, registry: Registry) -> str:
    """The drop-in of ``bridges@NAME`` for ``config_file``'s writable paths.

    Every path a file endpoint writes, and the embedded broker's ``data_dir``,
    resolved as the unit resolves them (against ``/var/lib/bridges/NAME``);
    those outside that state directory go to ``ReadWritePaths=``.

    Raises:
      ConfigError: the config has problems (as ``bridges check`` says them).
    """
    from .._config import load_config
    from ._routes import build_routes

    name = Path(config_file).name.removesuffix(".toml")
    state = STATE_ROOT / name
    config = load_config(config_file, registry, base_dir=state)
    wanted: list[Path] = []
    if config.broker.data_dir is not None:
        wanted.append(state / config.broker.data_dir)
    for route in build_routes(config, registry, checking=True):
        for endpoint in (route.source, route.sink, route.dead_letter):
            wanted.extend(getattr(endpoint, "writes", list)())
    outside = sorted({str(path) for path in wanted if not path.is_relative_to(state)})
    dropin = f"/etc/systemd/system/bridges@{name}.service.d/paths.conf"
    lines = [
        f"# {dropin}: what bridges@{name} may write outside {state}",
        f"# (then: systemctl daemon-reload; systemctl restart bridges@{name})",
        "[Service]",
    ]
    if outside:
        lines.append("ReadWritePaths=" + " ".join(_quoted(path) for path in outside))
    else:
        lines.append(f"# nothing: every path of {config_file} is under {state}")
    return "\n".join(lines) + "\n"


def _quoted(path: str) -> str:
    """A path as one word of ``ReadWritePaths=`` (specifier and space escapes)."""
    if any(c.isspace() or c in "\"'\\" for c in path):
        raise UnitError(f"{path!r}: a path with spaces, quotes or backslashes (rename it)")
    return path.replace("%", "%%")


def print_paths(config_file: str, registry: Registry, say: Callable[[str], None]) -> int:
    """``bridges unit --paths CONFIG``: print the drop-in; the exit status."""
    from .._convert import ConfigError

    try:
        text = render_paths(config_file, registry)
    except ConfigError as exc:
        for problem in exc.problems:
            say(str(problem))
        return 2
    except UnitError as exc:
        say(str(exc))
        return 1
    sys.stdout.write(text)
    return 0
