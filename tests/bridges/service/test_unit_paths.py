"""File routes outside the unit's state directory: refused before they run, and the
drop-in that allows them (``bridges unit --paths``).

Under ``ProtectSystem=strict`` every path but the state directory is read-only;
a route there used to retry "Read-only file system" for ever while ``bridges
check`` passed it. A read-only mount made here in a user namespace stands in
for the sandbox (``unshare``, util-linux; root in CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from family_kit import bridges_command

import bridges
import bridges._fs
import bridges._readfile
from bridges._builtins import default_registry
from bridges._cli import EXIT_CONFIG
from bridges._cli import main as cli_main
from bridges._readfile import MAX_STUCK

CONFIG = """
[broker]
embedded = true
listen = "127.0.0.1:0"
data_dir = "{data}"

[routes.drop]
source = {{ type = "file", path = "{inbox}", settle = 0 }}
sink = {{ type = "file", path = "outbox", format = "files" }}
"""


def unit_paths(config: Path) -> subprocess.CompletedProcess[str]:
    command = [*bridges_command(), "unit", "--paths", str(config)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_drop_in_lists_the_absolute_paths_outside_the_state_directory(tmp_path: Path) -> None:
    config = tmp_path / "orders.toml"
    config.write_text(CONFIG.format(data="store", inbox=tmp_path / "srv" / "in box"))
    done = unit_paths(config)
    assert done.returncode == 1  # a space cannot be one word of ReadWritePaths=
    assert "a path with spaces" in done.stderr
    config.write_text(CONFIG.format(data=tmp_path / "store", inbox=tmp_path / "srv" / "inbox"))
    done = unit_paths(config)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "# /etc/systemd/system/bridges@orders.service.d/paths.conf: what bridges@orders "
        "may write outside /var/lib/bridges/orders",
        "# (then: systemctl daemon-reload; systemctl restart bridges@orders)",
        "[Service]",
        f"ReadWritePaths={tmp_path / 'srv' / 'inbox'} {tmp_path / 'store'}",
    ]
    # Relative paths are the state directory's: nothing to add.
    config.write_text(CONFIG.format(data="store", inbox="inbox"))
    assert unit_paths(config).stdout.splitlines()[-1] == (
        f"# nothing: every path of {config} is under /var/lib/bridges/orders"
    )


@pytest.mark.parametrize("where", ["inbox", "outbox"])
def test_check_refuses_a_path_on_a_read_only_file_system(tmp_path: Path, where: str) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:  # never skipped: util-linux is on every Debian
        pytest.fail("unshare is missing (util-linux)")
    sandbox = tmp_path / "srv"
    sandbox.mkdir()
    paths = {"inbox": "inbox", "outbox": "outbox", where: str(sandbox / where)}
    config = tmp_path / "orders.toml"
    config.write_text(
        "[routes.drop]\n"
        f'source = {{ type = "file", path = "{paths["inbox"]}", settle = 0 }}\n'
        f'sink = {{ type = "file", path = "{paths["outbox"]}", format = "files" }}\n'
    )
    check = " ".join([*bridges_command(), "check", str(config)])
    done = subprocess.run(
        [unshare, "--map-root-user", "--mount", "sh", "-c",
         f"mount -t tmpfs -o ro none {sandbox} && {check}"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    said = done.stdout + done.stderr
    assert f"{sandbox / where} cannot be written: read-only file system in {sandbox}" in said
    assert "ReadWritePaths=" in said
    # The same config where the folder is writable passes.
    done = subprocess.run(
        [*bridges_command(), "check", str(config)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_check_refuses_a_folder_the_user_may_not_write() -> None:
    """As the unit's dynamic user sees a root-owned folder (``setpriv``, util-linux)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # never skipped: util-linux is on every Debian
        pytest.fail("setpriv is missing (util-linux)")
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # (pytest's tmp_path is 0700)
        os.chmod(folder, 0o755)
        check_as_nobody(setpriv, Path(folder))


def check_as_nobody(setpriv: str, tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    drop.mkdir(mode=0o755)  # root's: nobody may not write
    config = tmp_path / "orders.toml"
    config.write_text(
        "[routes.drop]\n"
        f'source = {{ type = "file", path = "{drop / "inbox"}", settle = 0 }}\n'
        'sink = { type = "file", path = "/dev/shm", format = "files" }\n'
    )
    config.chmod(0o644)
    done = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
         *bridges_command(), "check", str(config)],
        capture_output=True, text=True, timeout=60, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"{drop / 'inbox'} cannot be written: no permission to write (user 65534) in {drop}" in (
        done.stdout + done.stderr
    )


def test_a_folder_on_a_mount_that_hangs_fails_the_check_in_bounded_time_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bridges run`` checks its config before its event loop starts: a ``statvfs`` that
    never returns (a dead NFS server) fails the start with the folder's name, not a hang."""
    hung = tmp_path / "nfs"
    hung.mkdir()
    config = tmp_path / "orders.toml"
    config.write_text(
        "[routes.drop]\n"
        'source = { type = "file", path = "inbox", settle = 0 }\n'
        f'sink = {{ type = "file", path = "{hung / "outbox"}", format = "files" }}\n'
    )
    release = threading.Event()
    statvfs = os.statvfs

    def hanging(path: str | os.PathLike[str]) -> os.statvfs_result:
        if Path(path) == hung:
            release.wait()  # (in the kernel, for ever)
        return statvfs(path)

    monkeypatch.setattr(os, "statvfs", hanging)
    monkeypatch.setattr(bridges._fs, "WRITABLE_TIMEOUT", 0.2)
    try:
        started = time.monotonic()
        with pytest.raises(bridges.ConfigError) as caught:
            bridges.load_config(config, default_registry(), base_dir=tmp_path)
        assert time.monotonic() - started < 5
        assert str(caught.value.problems[0]).endswith(
            f"{hung / 'outbox'} cannot be checked: the file system did not answer within "
            f"0.2 s (WRITABLE_TIMEOUT) at {hung} (statvfs or access hung there: "
            "a network mount that is down?)"
        )
        monkeypatch.chdir(tmp_path)
        assert cli_main(["check", str(config)]) == EXIT_CONFIG
        assert f"{hung / 'outbox'} cannot be checked" in capsys.readouterr().err
        # Checks stuck there are capped (MAX_STUCK threads): the next is refused at once.
        said = None
        for _ in range(MAX_STUCK):
            started = time.monotonic()
            said = bridges._fs.unwritable_problem(hung / "more")
            assert said is not None
            if "still stuck" in said:
                break
        assert said == (
            f"{hung / 'more'} cannot be checked: the file system did not answer: earlier "
            f"checks there are still stuck at {hung / 'more'} (statvfs or access hung there: "
            "a network mount that is down?)"
        )
        assert time.monotonic() - started < 1.0  # (a new check would wait WRITABLE_TIMEOUT, 2 s)
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while bridges._readfile._stuck["check"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bridges._readfile._stuck == {"read": 0, "check": 0}  # (they ended once it answered)
