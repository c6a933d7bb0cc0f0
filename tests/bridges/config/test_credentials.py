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
        ("link", "cannot read: a symbolic link"),
        ("big", f"larger than {MAX_CREDENTIAL_BYTES} bytes"),
        ("dir", "not a regular file"),
        ("binary", "not UTF-8 text"),
        ("../outside", "not a valid credential name"),
        ("..", "not a valid credential name"),
    ):
        text = problem_for(creds, monkeypatch, name)
        assert f"credential {name!r}: {why}" in text, text
        assert "do-not-read-me" not in text
