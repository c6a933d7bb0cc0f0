"""``${credential:NAME}``: systemd credentials read from ``$CREDENTIALS_DIRECTORY``, safely."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridges import ConfigError, default_registry, parse_config
from bridges._convert import MAX_CREDENTIAL_BYTES, read_credential


def config_with(passcode: str) -> dict[str, object]:
    return {
        "routes": {
            "r": {
                "source": {"type": "file", "path": "in"},
                "sink": {"type": "stomp", "destination": "/queue/x", "passcode": passcode},
            }
        }
    }


def test_a_credential_is_read_from_the_credentials_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broker-pass").write_text("s3cret\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    config = parse_config(config_with("${credential:broker-pass}"), default_registry(plugins=False))
    assert config.routes[0].sink.config.passcode == "s3cret"


def test_a_file_of_the_units_credentials_directory_is_found_by_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LoadCredential=bridges:/etc/bridges/credentials/orders makes the file
    # broker-pass arrive as bridges_broker-pass (systemd.exec(5)).
    (tmp_path / "bridges_broker-pass").write_text("from-the-directory\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    config = parse_config(config_with("${credential:broker-pass}"), default_registry(plugins=False))
    assert config.routes[0].sink.config.passcode == "from-the-directory"
    # A credential loaded under its own name (LoadCredential=broker-pass:...) comes first.
    (tmp_path / "broker-pass").write_text("by-its-name")
    assert read_credential("broker-pass") == "by-its-name"
    # The directory's name is also reachable as written.
    assert read_credential("bridges_broker-pass") == "from-the-directory"


def problem_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        parse_config(config_with(f"${{credential:{name}}}"), default_registry(plugins=False))
    return str(caught.value)


def test_a_missing_credential_names_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = problem_for(tmp_path, monkeypatch, "nope")
    assert "route 'r': sink.passcode: credential 'nope': not in $CREDENTIALS_DIRECTORY" in text
    assert "LoadCredential=nope:" in text
    assert "as nope or bridges_nope" in text
    monkeypatch.delenv("CREDENTIALS_DIRECTORY")
    with pytest.raises(ValueError, match="CREDENTIALS_DIRECTORY is not set"):
        read_credential("nope")


def test_a_credential_never_leaves_its_directory_or_is_too_big(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (tmp_path / "outside").write_text("do-not-read-me")
    os.symlink(tmp_path / "outside", creds / "link")
    (creds / "big").write_bytes(b"x" * (MAX_CREDENTIAL_BYTES + 1))
    (creds / "dir").mkdir()
    (creds / "binary").write_bytes(b"\xff\xfe")
    for name, why in (
        ("link", "a symbolic link (not followed)"),
        ("big", f"larger than {MAX_CREDENTIAL_BYTES} bytes"),
        ("dir", "a directory, not a regular file"),
        ("binary", "not UTF-8 text"),
        ("../outside", "not a valid credential name"),
        ("..", "not a valid credential name"),
    ):
        text = problem_for(creds, monkeypatch, name)
        assert f"credential {name!r}: {why}" in text, text
        assert "do-not-read-me" not in text


def test_the_directory_name_gets_the_same_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (tmp_path / "outside").write_text("do-not-read-me")
    os.symlink(tmp_path / "outside", creds / "bridges_link")
    (creds / "bridges_big").write_bytes(b"x" * (MAX_CREDENTIAL_BYTES + 1))
    os.mkfifo(creds / "bridges_fifo")
    for name, why in (
        ("link", "a symbolic link (not followed)"),
        ("big", f"larger than {MAX_CREDENTIAL_BYTES} bytes"),
        ("fifo", "a FIFO, not a regular file"),
        ("x" * 250, "not in $CREDENTIALS_DIRECTORY"),  # bridges_xxx... is too long to exist
    ):
        text = problem_for(creds, monkeypatch, name)
        assert f"credential {name!r}: {why}" in text, text
        assert "do-not-read-me" not in text
