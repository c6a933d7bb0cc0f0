"""Every file the config names (``*_file`` secrets, credentials, CA bundles, the config
itself) is read by one reader: a regular file only, bounded in size and in time."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from family_kit import bridges_command

from bridges import ConfigError, default_registry, parse_config
from bridges import _readfile as readfile
from bridges._readfile import MAX_SECRET_BYTES, READ_TIMEOUT, FileRefused, read_file

#: (a name, how to make it in a directory, what the error says)
BAD_FILES = (
    ("fifo", lambda p: os.mkfifo(p), "a FIFO, not a regular file"),
    ("zero", lambda p: os.symlink("/dev/zero", p), "a symbolic link (not followed)"),
    ("dir", lambda p: p.mkdir(), "a directory, not a regular file"),
    ("link", lambda p: os.symlink(p.with_name("good"), p), "a symbolic link (not followed)"),
    ("big", lambda p: p.write_bytes(b"x" * (MAX_SECRET_BYTES + 1)), "larger than 65536 bytes"),
)

#: Endpoint tables with one ``*_file`` key each: {FILE} is the file.
ENDPOINTS = {
    "stomp": 'sink = {{ type = "stomp", destination = "/queue/x", login = "u", '
    'passcode_file = "{FILE}" }}',
    "redis": 'sink = {{ type = "redis", stream = "s", password_file = "{FILE}" }}',
    "http": 'sink = {{ type = "http", url = "https://example.com/", '
    'bearer_token_file = "{FILE}" }}',
    "mqtt": 'sink = {{ type = "mqtt", url = "mqtts://127.0.0.1", topic = "t", '
    'ca_file = "{FILE}" }}',
}


def write_config(tmp_path: Path, files: dict[str, str]) -> Path:
    """A config with a route per (endpoint, bad file) pair."""
    lines = []
    for endpoint, table in ENDPOINTS.items():
        for name, path in files.items():
            lines.append(f"[routes.{endpoint}-{name}]")
            lines.append('source = { type = "file", path = "in" }')
            lines.append(table.format(FILE=path))
    config = tmp_path / "bridge.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def run_check(config: Path) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [*bridges_command(), "check", str(config)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def test_bridges_check_refuses_a_fifo_a_device_a_directory_a_link_and_a_big_file_by_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "good").write_text("s3cret-value\n")
    files = {}
    for name, make, _ in BAD_FILES:
        make(tmp_path / name)
        files[name] = str(tmp_path / name)
    files["devzero"] = "/dev/zero"
    config = write_config(tmp_path, files)
    status, output, took = run_check(config)
    assert status == 2, output
    assert took < 10, took  # (today: hangs on the FIFO; /dev/zero reads until MemoryError)
    key = {"stomp": "passcode_file", "redis": "password_file", "http": "bearer_token_file"}
    key["mqtt"] = "ca_file"
    for endpoint in ENDPOINTS:
        for name, _, why in BAD_FILES:
            where = f"route '{endpoint}-{name}': sink.{key[endpoint]}: "
            path = tmp_path / name
            expected = f"{where}cannot read {str(path)!r}: {why}"
            if endpoint == "mqtt" and name in ("link", "big"):
                # A CA bundle is no secret: its link is followed, and it may be bigger.
                expected = f"{where}{str(path)!r}: not a PEM CA bundle"
            elif endpoint == "mqtt" and name == "zero":
                expected = f"{where}cannot read {str(path)!r}: a character device, not a regular"
            assert expected in output, output
        device = f"route '{endpoint}-devzero': sink.{key[endpoint]}: cannot read '/dev/zero': "
        assert f"{device}a character device, not a regular file" in output, output
    assert "s3cret-value" not in output


def test_a_link_is_read_when_the_config_says_so(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("through-the-link\n")
    os.symlink(tmp_path / "real", tmp_path / "link")
    table = {
        "source": {"type": "file", "path": "in"},
        "sink": {"type": "stomp", "destination": "/q", "passcode_file": str(tmp_path / "link")},
    }
    registry = default_registry(plugins=False)
    with pytest.raises(ConfigError, match=r"passcode_file: cannot read .*symbolic link"):
        parse_config({"routes": {"r": table}}, registry)
    config = parse_config(
        {"bridge": {"follow_secret_links": True}, "routes": {"r": table}}, registry
    )
    assert config.routes[0].sink.config.passcode == "through-the-link"
    assert "through-the-link" in config.secrets
    (tmp_path / "real").unlink()
    os.mkfifo(tmp_path / "real")  # followed, the target gets the same checks
    with pytest.raises(ConfigError, match=r"passcode_file: cannot read .*a FIFO, not a regular"):
        parse_config({"bridge": {"follow_secret_links": True}, "routes": {"r": table}}, registry)


def test_a_config_file_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "bridge.toml")
    status, output, took = run_check(tmp_path / "bridge.toml")
    assert status == 2
    assert took < 10
    assert "bridge.toml: cannot read: a FIFO, not a regular file" in output, output
    status, output, _ = run_check(Path("/dev/zero"))
    assert status == 2
    assert "/dev/zero: cannot read: a character device, not a regular file" in output, output


def test_a_read_that_hangs_is_abandoned_after_the_timeout_and_bounded_in_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file system that does not answer (a dead NFS server) blocks open() in the
    # kernel; no unprivileged test can make one, so open() waits on an event here.
    release = threading.Event()
    real_open = os.open

    def hanging_open(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith("hung"):
            release.wait(30)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", hanging_open)
    (tmp_path / "hung").write_text("x")
    try:
        started = time.monotonic()
        with pytest.raises(FileRefused, match=r"not read within 1 s"):
            read_file(tmp_path / "hung")  # (the default timeout)
        assert READ_TIMEOUT <= time.monotonic() - started < READ_TIMEOUT + 1
        for _ in range(readfile.MAX_STUCK - 1):
            with pytest.raises(FileRefused, match=r"not read within 0.1 s"):
                read_file(tmp_path / "hung", timeout=0.1)
        started = time.monotonic()
        with pytest.raises(FileRefused, match=r"4 earlier file reads are still stuck"):
            read_file(tmp_path / "hung", timeout=0.1)
        assert time.monotonic() - started < 0.5  # refused at once: no new thread
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while readfile._stuck["read"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert readfile._stuck["read"] == 0  # the abandoned threads ended once the file system answered
    assert read_file(tmp_path / "hung") == b"x"


def test_a_webhook_listeners_key_file_gets_the_same_checks(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not checked here\n")
    (tmp_path / "huge.key").write_bytes(b"x" * (readfile.MAX_CA_BYTES + 1))
    registry = default_registry(plugins=False)
    huge = str(tmp_path / "huge.key")
    for keyfile, why in (
        ("/dev/zero", "cannot read '/dev/zero': a character device, not a regular file"),
        (huge, f"cannot read {huge!r}: larger than {readfile.MAX_CA_BYTES} bytes"),
    ):
        source = {
            "type": "http",
            "listen": "127.0.0.1:0",
            "path": "/hook",
            "certfile": str(tmp_path / "cert.pem"),
            "keyfile": keyfile,
        }
        route = {"source": source, "sink": {"type": "file", "path": "out"}}
        with pytest.raises(ConfigError) as caught:
            parse_config({"routes": {"r": route}}, registry, base_dir=tmp_path)
        assert f"route 'r': source.keyfile: {why}" in str(caught.value), str(caught.value)
