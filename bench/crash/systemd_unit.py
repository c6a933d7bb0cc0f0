"""examples/systemd/bridges@.service under a real systemd, in a booted Debian bookworm.

    .venv/bin/python bench/crash/systemd_unit.py [--quick] [--files 500] [--json]

Needs root, systemd-nspawn and debootstrap (``scripts/test`` installs them);
see ``bench/crash/_nspawn.py`` for the container (cached base tree, private network,
always powered off). In it, the install the README documents:

- a wheel of this checkout and its dependencies (``pip wheel '.[bridges]'``,
  made here and installed offline: the container has no network but its own
  loopback) into ``python3 -m venv /opt/bridges``;
- ``/opt/bridges/bin/bridges unit`` as ``/etc/systemd/system/bridges@.service``,
  checked to be ``examples/systemd/bridges@.service`` byte for byte;
- a STOMP broker that accepts one login (``trio-stomp broker --users``, with
  a data dir, as a service of its own), whose passcode the bridge gets only
  from ``/etc/bridges/credentials/orders/broker-pass`` through the unit's
  ``LoadCredential=``; and ``/etc/bridges/orders.toml``: files from
  ``inbox/`` through that broker into ``outbox/``.

A drop-in sets ``WatchdogSec=2`` (the unit's 30 s would make the run slow);
nothing else of the unit is changed. Checked, in order:

1. start: ``systemctl start bridges@orders`` returns (Type=notify: after
   READY=1), ``is-active`` says active, the status line says "2 routes: 2
   running" (both connected to the broker with the credential).
2. credential: systemd put ``bridges_broker-pass`` in the service's
   credentials directory and files cross the broker that accepts only it.
3. watchdog: ``WatchdogTimestamp`` (the last WATCHDOG=1 systemd took) moves
   on, twice. Full run only: the process frozen with SIGSTOP is killed by
   systemd's watchdog and restarted (``NRestarts``), and its files arrive.
4. reload: a third route added to the config, ``systemctl reload``: same
   main PID, status "3 routes", a file through the new route.
5. refused reload: a config with a mistake makes ``systemctl reload`` fail
   (``ExecReload`` is ``bridges reload --wait``); ``journalctl -p warning``
   shows why; the process runs on (same PID), its status says so.
6. paths: a second instance whose route watches ``/srv/drop/inbox``
   (read-only under ``ProtectSystem=strict``) fails to start, naming the
   path; with the drop-in ``bridges unit --paths`` prints, it starts and a
   file crosses.
7. stop: ``--files`` files put in the inbox, ``systemctl stop`` once the
   first is through: a clean result (exit 0, or 3: handed back);
   after a start again every file is in ``outbox/`` with its content, none lost.

Prints one line per check and the seconds each took (``--json``: one
object; the test suite runs ``--quick --json``). Exit 0 when every check
passed, 1 when one failed, 2 when the container could not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _nspawn import Container, ContainerError, base_tree, booted, missing_tools

ROOT: Final = Path(__file__).resolve().parents[2]
UNIT_FILE: Final = ROOT / "examples" / "systemd" / "bridges@.service"
INSTANCE: Final = "orders"
UNIT: Final = f"bridges@{INSTANCE}.service"
#: The service's state directory (DynamicUser=: under /var/lib/private), as seen from here.
STATE: Final = Path("var/lib/private/bridges") / INSTANCE
BROKER_PORT: Final = 61700  # in the container's own network namespace
PASSCODE: Final = "s3cret-from-LoadCredential"
LIMIT: Final = 60.0  # s: the longest any one wait may take


class CheckFailed(Exception):
    """What the unit did is not what it must do (a finding)."""


_STOMP = (
    f'url = "stomp://127.0.0.1:{BROKER_PORT}", destination = "/queue/orders", '
    'login = "bridge", passcode = "${credential:broker-pass}"'
)

ROUTES = f"""
[routes.to-broker]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.1 }}
sink = {{ type = "stomp", {_STOMP} }}

[routes.from-broker]
source = {{ type = "stomp", {_STOMP} }}
sink = {{ type = "file", path = "outbox", format = "files", name = "{{header:file-name}}" }}
"""

LATE_ROUTE = """
[routes.late]
source = { type = "file", path = "late-in", settle = 0, poll_interval = 0.1 }
sink = { type = "file", path = "late-out", format = "files", name = "{header:file-name}" }
"""


def wait_for(what: str, test: Callable[[], bool], limit: float = LIMIT) -> None:
    deadline = time.monotonic() + limit
    while not test():
        if time.monotonic() > deadline:
            raise CheckFailed(f"not within {limit:.0f} s: {what}")
        time.sleep(0.1)


def wheelhouse(into: Path) -> None:
    """Wheels of this checkout (with its ``bridges`` extra) and of its dependencies."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(into),
            f"{ROOT}[bridges]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise ContainerError(f"pip wheel failed:\n{done.stdout}{done.stderr}")


def install(box: Container, wheels: Path) -> None:
    """The documented install: a venv under /opt/bridges, the unit from ``bridges unit``."""
    shutil.copytree(wheels, box.root / "var/tmp/wheels")
    box.run("python3", "-m", "venv", "/opt/bridges")
    box.run(
        "/opt/bridges/bin/pip", "install", "--quiet", "--no-index", "--disable-pip-version-check",
        "--find-links", "/var/tmp/wheels", "trio-stomp[bridges]",
    )  # fmt: skip
    unit = box.run("/opt/bridges/bin/bridges", "unit").stdout
    if unit != UNIT_FILE.read_text():
        raise CheckFailed("`bridges unit` in /opt/bridges is not examples/systemd/bridges@.service")
    (box.root / "etc/systemd/system/bridges@.service").write_text(unit)
    dropin = box.root / f"etc/systemd/system/{UNIT}.d"
    dropin.mkdir(parents=True)
    (dropin / "watchdog.conf").write_text("[Service]\nWatchdogSec=2\n")
    creds = box.root / "etc/bridges/credentials" / INSTANCE
    creds.mkdir(parents=True, mode=0o700)
    secret = creds / "broker-pass"
    secret.write_text(PASSCODE + "\n")
    secret.chmod(0o600)
    (box.root / "etc/bridges" / f"{INSTANCE}.toml").write_text(ROUTES)
    users = box.root / "etc/stomp-users"
    users.write_text(f"bridge:{PASSCODE}\n")
    users.chmod(0o600)
    box.run("systemctl", "daemon-reload")
    box.run(
        "systemd-run", "--unit=stomp-broker", "--property=StateDirectory=stomp-broker",
        "/opt/bridges/bin/trio-stomp", "broker", "--listen", f"127.0.0.1:{BROKER_PORT}",
        "--users", "/etc/stomp-users", "--data-dir", "/var/lib/stomp-broker",
    )  # fmt: skip
    wait_for("the STOMP broker listening", lambda: "broker listening on" in box.run(
        "journalctl", "-u", "stomp-broker", "-o", "cat", "--no-pager").stdout)  # fmt: skip


def put_files(directory: Path, names: list[str]) -> None:
    """Files named ``names`` (each body names its file), each renamed into ``directory``."""
    staging = directory.parent / "staging"
    staging.mkdir(exist_ok=True)
    for name in names:
        (staging / name).write_text(f"file {name}\n")
        os.rename(staging / name, directory / name)


def arrived(directory: Path, names: list[str]) -> list[str]:
    """Which of ``names`` are in ``directory`` with the content they were sent with."""
    found = []
    for name in names:
        try:
            if (directory / name).read_text() == f"file {name}\n":
                found.append(name)
        except FileNotFoundError:
            pass
    return found


@contextmanager
def timed(figures: dict[str, Any], name: str, say: Callable[[str], None]) -> Iterator[None]:
    started = time.monotonic()
    yield
    figures[f"{name}_s"] = round(time.monotonic() - started, 2)
    say(f"{name}: ok ({figures[f'{name}_s']} s)")


def check_start(box: Container, figures: dict[str, Any]) -> None:
    box.run("systemctl", "start", UNIT, timeout=LIMIT)  # returns once READY=1 was sent
    state = box.run("systemctl", "is-active", UNIT, check=False).stdout.strip()
    if state != "active":
        raise CheckFailed(f"is-active says {state!r} after systemctl start")
    status = box.show(UNIT, "StatusText")
    if status != "2 routes: 2 running":  # the broker is up, and takes the credential
        raise CheckFailed(f"status line {status!r}")
    figures["status_at_start"] = status


def check_credential(box: Container, state: Path) -> None:
    # /run is the container's own tmpfs: look from inside.
    creds = box.run("ls", "-A", f"/run/credentials/{UNIT}").stdout.split()
    if creds != ["bridges_broker-pass"]:
        raise CheckFailed(f"the service's credentials directory holds {creds}")
    names = ["credential-1", "credential-2"]
    put_files(state / "inbox", names)
    wait_for("2 files through the broker that accepts only the credential",
             lambda: arrived(state / "outbox", names) == names)  # fmt: skip
    journal = box.run("journalctl", "-u", UNIT, "--no-pager", "-o", "cat").stdout
    if PASSCODE in journal:
        raise CheckFailed("the credential's value is in the journal")


def watchdog_stamp(box: Container) -> int:
    return int(box.show(UNIT, "WatchdogTimestampMonotonic") or 0)


def check_watchdog(box: Container) -> None:
    first = watchdog_stamp(box)
    wait_for("a WATCHDOG=1 after start", lambda: watchdog_stamp(box) > first, limit=5)
    second = watchdog_stamp(box)
    wait_for("a second WATCHDOG=1", lambda: watchdog_stamp(box) > second, limit=5)


def check_wedged_is_restarted(box: Container, state: Path) -> None:
    restarts = int(box.show(UNIT, "NRestarts"))
    box.run("systemctl", "kill", "--kill-who=main", "--signal=SIGSTOP", UNIT)
    wait_for("the frozen process killed by the watchdog and restarted",
             lambda: int(box.show(UNIT, "NRestarts")) > restarts)  # fmt: skip
    wait_for("active again", lambda: box.show(UNIT, "ActiveState") == "active")
    journal = box.run("journalctl", "-u", UNIT, "--no-pager").stdout
    if "Watchdog timeout" not in journal:
        raise CheckFailed("the restart was not the watchdog's")
    names = ["after-watchdog"]
    put_files(state / "inbox", names)
    wait_for("a file after the restart", lambda: arrived(state / "outbox", names) == names)


def check_reload(box: Container, state: Path) -> None:
    pid = box.show(UNIT, "MainPID")
    (box.root / "etc/bridges" / f"{INSTANCE}.toml").write_text(ROUTES + LATE_ROUTE)
    box.run("systemctl", "reload", UNIT, timeout=LIMIT)
    wait_for(
        "status '3 routes' after reload",
        lambda: box.show(UNIT, "StatusText").startswith("3 routes"),
    )
    if box.show(UNIT, "MainPID") != pid:
        raise CheckFailed("reload restarted the process")
    (state / "late-in").mkdir(exist_ok=True)
    names = ["late-1"]
    put_files(state / "late-in", names)
    wait_for("a file through the route the reload added",
             lambda: arrived(state / "late-out", names) == names)  # fmt: skip


def check_refused_reload(box: Container) -> None:
    """A config with a mistake: `systemctl reload` fails, the journal says why at
    warning, and the process runs on with the config it had."""
    config = box.root / "etc/bridges" / f"{INSTANCE}.toml"
    good = config.read_text()
    pid = box.show(UNIT, "MainPID")
    config.write_text(good.replace('format = "files"', 'format = "nope"', 1))
    done = box.run("systemctl", "reload", UNIT, timeout=LIMIT, check=False)
    config.write_text(good)
    if done.returncode == 0:
        raise CheckFailed("systemctl reload succeeded with a refused config")
    warnings = box.run("journalctl", "-u", UNIT, "-p", "warning", "-o", "cat", "--no-pager").stdout
    if "reload failed (1 problem in the config" not in warnings:
        raise CheckFailed("the refused reload is not in journalctl -p warning")
    if box.show(UNIT, "MainPID") != pid or box.show(UNIT, "ActiveState") != "active":
        raise CheckFailed("a refused reload stopped or restarted the service")
    if not box.show(UNIT, "StatusText").startswith("reload failed"):
        raise CheckFailed(f"status after a refused reload: {box.show(UNIT, 'StatusText')!r}")


DROP = "drop"
DROP_UNIT = f"bridges@{DROP}.service"
DROP_ROUTES = """
[routes.drop]
source = { type = "file", path = "/srv/drop/inbox", settle = 0, poll_interval = 0.1 }
sink = { type = "file", path = "outbox", format = "files", name = "{header:file-name}" }
"""


def check_paths_outside_state(box: Container) -> None:
    """A route outside the state directory: refused at start (not retried for ever),
    then runs with the drop-in `bridges unit --paths` prints."""
    # As docs/howto/systemd.md says: a group of droppers owns the folder.
    box.run("groupadd", "--system", "drop")
    box.run("install", "-d", "-m", "2770", "-g", "drop", "/srv/drop/inbox")
    (box.root / "etc/bridges/credentials" / DROP).mkdir(mode=0o700)
    (box.root / "etc/bridges" / f"{DROP}.toml").write_text(DROP_ROUTES)
    if box.run("systemctl", "start", DROP_UNIT, timeout=LIMIT, check=False).returncode == 0:
        raise CheckFailed("a route on a read-only path started")
    journal = box.run("journalctl", "-u", DROP_UNIT, "-o", "cat", "--no-pager").stdout
    if "/srv/drop/inbox cannot be written: read-only file system" not in journal:
        raise CheckFailed("the start's failure does not name the read-only path")
    # (Restart=on-failure retries a failed ExecStartPre: stop that before the fix.)
    box.run("systemctl", "stop", DROP_UNIT, timeout=LIMIT, check=False)
    box.run("systemctl", "reset-failed", DROP_UNIT, check=False)
    dropin = box.root / f"etc/systemd/system/{DROP_UNIT}.d"
    dropin.mkdir(parents=True)
    paths = box.run("/opt/bridges/bin/bridges", "unit", "--paths", f"/etc/bridges/{DROP}.toml")
    if "ReadWritePaths=/srv/drop/inbox" not in paths.stdout.splitlines():
        raise CheckFailed(f"bridges unit --paths printed {paths.stdout!r}")
    (dropin / "paths.conf").write_text(paths.stdout + "SupplementaryGroups=drop\n")
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "start", DROP_UNIT, timeout=LIMIT)
    names = ["dropped-1"]
    put_files(box.root / "srv/drop/inbox", names)
    outbox = box.root / "var/lib/private/bridges" / DROP / "outbox"
    wait_for("a file through the route outside the state directory",
             lambda: arrived(outbox, names) == names)  # fmt: skip
    box.run("systemctl", "stop", DROP_UNIT, timeout=LIMIT)


def check_stop_loses_nothing(
    box: Container, state: Path, count: int, figures: dict[str, Any]
) -> None:
    names = [f"stop-{i:05d}" for i in range(count)]
    put_files(state / "inbox", names)
    # Stop while they flow: some through, some in the broker, some in flight, some not taken.
    wait_for("the first of the files through", lambda: arrived(state / "outbox", names) != [])
    box.run("systemctl", "stop", UNIT, timeout=LIMIT)
    result = box.show(UNIT, "Result")
    status = box.show(UNIT, "ExecMainStatus")
    figures["stop"] = {
        "result": result,
        "exit": status,
        "out_at_stop": len(arrived(state / "outbox", names)),
    }
    if result != "success" or status not in ("0", "3"):
        raise CheckFailed(f"stop: Result={result} exit {status}")
    box.run("systemctl", "start", UNIT, timeout=LIMIT)
    try:
        wait_for(f"all {count} files in outbox/ after the restart",
                 lambda: len(arrived(state / "outbox", names)) == count)  # fmt: skip
    finally:
        figures["lost"] = count - len(arrived(state / "outbox", names))


def journal_tail(box: Container) -> str:
    """The last lines of the container's journal, to say what went wrong."""
    try:
        done = box.run("journalctl", "--no-pager", "-n", "60", check=False, timeout=20)
    except subprocess.SubprocessError as exc:
        return f"(no journal: {exc})"
    return "the container's journal, last lines:\n" + done.stdout


def scenario(quick: bool, count: int, say: Callable[[str], None]) -> dict[str, Any]:
    figures: dict[str, Any] = {"quick": quick, "files": count}
    started = time.monotonic()
    base, figures["debootstrap_s"] = base_tree(say)
    with tempfile.TemporaryDirectory(prefix="trio-stomp-wheels.") as wheels:
        with timed(figures, "wheels", say):
            wheelhouse(Path(wheels))
        booting = time.monotonic()
        with booted(base) as box:
            figures["boot_s"] = round(time.monotonic() - booting, 2)
            say(f"boot: ok ({figures['boot_s']} s)")
            state = box.root / STATE
            try:
                with timed(figures, "install", say):
                    install(box, Path(wheels))
                with timed(figures, "start", say):
                    check_start(box, figures)
                with timed(figures, "credential", say):
                    check_credential(box, state)
                with timed(figures, "watchdog", say):
                    check_watchdog(box)
                if not quick:
                    with timed(figures, "watchdog_restart", say):
                        check_wedged_is_restarted(box, state)
                with timed(figures, "reload", say):
                    check_reload(box, state)
                with timed(figures, "refused_reload", say):
                    check_refused_reload(box)
                with timed(figures, "paths", say):
                    check_paths_outside_state(box)
                with timed(figures, "stop", say):
                    check_stop_loses_nothing(box, state, count, figures)
            except (CheckFailed, ContainerError, subprocess.SubprocessError):
                say(journal_tail(box))
                raise
    figures["total_s"] = round(time.monotonic() - started, 2)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the watchdog restart (CI)")
    parser.add_argument("--files", type=int, default=500, help="files put in before the stop")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the container is powered off and its copy removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    say: Callable[[str], None] = (lambda line: print(line, file=sys.stderr)) if args.json else print
    missing = missing_tools()
    if missing:
        print(
            f"systemd_unit: missing {', '.join(missing)} (scripts/test installs them)",
            file=sys.stderr,
        )
        return 2
    try:
        figures = scenario(args.quick, args.files, say)
    except (ContainerError, subprocess.SubprocessError) as exc:  # (a timeout of a step)
        print(f"systemd_unit: {exc}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        print(f"systemd_unit: FAILED: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(figures) if args.json else f"all checks passed: {json.dumps(figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
