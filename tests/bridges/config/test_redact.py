"""Secrets redacted by value: which values, in which forms, and what is left alone."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from bridges import ConfigError, default_registry, parse_config
from bridges._cli import main
from bridges._flow import one_line
from bridges._redact import MASK, MIN_SECRET_CHARS, Redactor, redact, redacting


def test_every_written_form_of_a_secret_is_masked_and_the_longest_first() -> None:
    redactor = Redactor()
    secret = 'p@ss "wo\\rd" é'
    added = redactor.add([secret, "p@ss", "ab"])
    assert "ab" not in added  # shorter than MIN_SECRET_CHARS: left alone
    assert MIN_SECRET_CHARS == 4
    for form in (
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        "p%40ss%20%22wo%5Crd%22%20%C3%A9",
    ):
        text = redactor.redact(f"before {form} after")
        assert text == f"before {MASK} after", (form, text)
    assert redactor.redact("p@ss alone, a tab, ab") == f"{MASK} alone, a tab, ab"
    redactor.remove(added)
    assert redactor.redact(secret) == secret


def test_a_cut_never_leaves_the_start_of_a_secret() -> None:
    redactor = Redactor()
    redactor.add(["0123456789abcdef"])
    text = "x" * 10 + "0123456789abcdef" + "y" * 10
    for limit in range(10, len(text) + 1):
        cut = redactor.redact_cut(text, limit)
        assert "0123" not in cut, (limit, cut)
        assert len(cut) <= limit + len(MASK)
    assert redactor.mask_tail("text ending 0123") == f"text ending {MASK}"
    assert redactor.mask_tail("text ending 012") == "text ending 012"  # too short to say


def test_a_config_resolves_every_kind_of_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pass").write_text("from-a-file\n")
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "c").write_text("from-a-credential")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "creds"))
    monkeypatch.setenv("SECRET_ENV", "from-the-environment")
    monkeypatch.setenv("NOT_SECRET", "a-directory")
    routes = {
        "a": {
            "source": {"type": "file", "path": "${NOT_SECRET}"},
            "sink": {"type": "stomp", "destination": "/q", "passcode_file": "pass"},
        },
        "b": {
            "source": {"type": "file", "path": "in"},
            "sink": {
                "type": "http",
                "url": "https://user:in%40url@example.com/${credential:c}",
                "bearer_token": "${SECRET_ENV}",
                "secret": ["literal-1", "literal-2"],
                "signature": "github",
            },
        },
    }
    config = parse_config({"routes": routes}, default_registry(plugins=False), base_dir=tmp_path)
    basic = base64.b64encode(b"user:in@url").decode()
    assert config.secrets == {
        "from-a-file",
        "from-a-credential",
        "from-the-environment",
        "literal-1",
        "literal-2",
        "in%40url",
        "in@url",
        basic,
    }
    # A ${NAME} outside a secret field is configuration, not a secret.
    assert "a-directory" not in config.secrets


def test_one_line_masks_the_process_secrets_before_it_cuts() -> None:
    error = ValueError("the target said: token=0123456789abcdef" + " more" * 200)
    assert "0123456789abcdef" in one_line(error)
    with redacting(["0123456789abcdef"]):
        assert one_line(error).startswith(f"ValueError: the target said: token={MASK} more")
        assert "0123" not in one_line(error, limit=40)
        assert redact("0123456789abcdef") == MASK
    assert redact("0123456789abcdef") == "0123456789abcdef"  # (the block ended)


def test_bridges_check_warns_of_a_secret_too_short_to_redact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bridge.toml"
    route = '[routes.r]\nsource = { type = "file", path = "in" }\n'
    sink = 'sink = { type = "stomp", destination = "/q", passcode = "%s" }\n'
    config.write_text(route + sink % "abc")
    assert main(["check", str(config)]) == 0
    warning = "warning: 1 secret value(s) shorter than 4 characters: not redacted"
    assert warning in capsys.readouterr().err
    config.write_text(route + sink % "abcd")
    assert main(["check", str(config)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_config_problem_never_quotes_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A header template built from a credential, which is not a valid template:
    # the endpoint's error quotes the value.
    (tmp_path / "token").write_text("Bearer {not-a-template")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    sink = {"type": "http", "url": "http://host/", "headers": {"a": "${credential:token}"}}
    route = {"source": {"type": "file", "path": "in"}, "sink": sink}
    with pytest.raises(ConfigError) as caught:
        parse_config({"routes": {"r": route}}, default_registry(plugins=False))
    assert "route 'r': sink.headers.a: stray '{' in template '***'" in str(caught.value)
    assert "not-a-template" not in str(caught.value)
    assert all("not-a-template" not in problem.message for problem in caught.value.problems)
