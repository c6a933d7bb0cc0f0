"""Secrets redacted by value: which values, in which forms, and what is left alone."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import urllib.parse
from pathlib import Path

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bridges import ConfigError, default_registry, parse_config
from bridges._cli import main
from bridges._flow import one_line
from bridges._redact import MASK, MIN_SECRET_CHARS, Redactor, redact, redact_cut, redacting
from bridges.service._logs import configure_logging


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


# -- every form a peer's encoding gives a secret (Hypothesis) ---------------------------------

#: Secrets made of what encodings treat specially: space, / + % quotes, backslash, a
#: newline, non-ASCII (2-, 3- and 4-byte UTF-8).
ODD_SECRETS = st.text(alphabet="ab9XZ /+%\"'\\\né中😀=&?", min_size=MIN_SECRET_CHARS, max_size=16)


def _lower_hex(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def echoed_forms(secret: str) -> dict[str, str]:
    """How a peer may write ``secret`` back: name -> the text it puts in its answer.

    Written here from the encoders themselves (not from bridges._redact's list)."""
    data = secret.encode()
    as_json = json.dumps(secret)[1:-1]
    found = {
        "raw": secret,
        "json": as_json,
        "json-escaped-slash": as_json.replace("/", "\\/"),
        "json-utf8": json.dumps(secret, ensure_ascii=False)[1:-1],
        "repr": repr(secret)[1:-1],
        "repr-of-json": repr(as_json.replace("/", "\\/"))[1:-1],
        "percent-upper": urllib.parse.quote(secret, safe=""),
        "percent-lower": _lower_hex(urllib.parse.quote(secret, safe="")),
        "plus": urllib.parse.quote_plus(secret, safe=""),
        "plus-lower": _lower_hex(urllib.parse.quote_plus(secret, safe="")),
        "httpx-params": str(httpx.Request("GET", "http://h/", params={"q": secret}).url)[11:],
        "basic": base64.b64encode(b"webuser:" + data).decode(),
        "base64": base64.b64encode(data).decode(),
        "base64-urlsafe": base64.urlsafe_b64encode(data).decode(),
    }
    if "\n" not in secret:
        # httpx keeps "/" (and more) in a query written in the URL: open%20sesame/42.
        found["httpx-url"] = str(httpx.URL(f"http://h/?q={secret}").query.decode())[2:]
    for shift in (1, 2):  # inside a longer base64 text, at each alignment
        found[f"base64-in-{shift}"] = base64.b64encode(b"x" * shift + data + b"yz").decode()
        found[f"urlsafe-in-{shift}"] = base64.urlsafe_b64encode(b"?" * shift + data).decode()
    return found


def _core(name: str, form: str, secret: str) -> str:
    """What of ``form`` must not survive: all of it, but a base64 text's ends (the few
    characters that also carry the bits of what surrounds the secret)."""
    if name == "basic" or "-in-" in name:
        return form[4:-4] if len(form) > 12 else "\0never"  # (too short to say: MASK is)
    return form


@settings(max_examples=60, deadline=None)
@given(secret=ODD_SECRETS)
def test_each_form_of_an_odd_secret_is_masked_in_logs_dead_letters_and_errors(
    secret: str,
) -> None:
    assume(secret.strip(" ") and len(set(secret)) > 1)
    forms = echoed_forms(secret)
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with redacting([secret]):
            for log_format in ("text", "json"):
                configure_logging("info", log_format, journal=False, stream=out)
                for name, form in forms.items():
                    echo = f"the target said «{form}» ({name})"
                    logging.getLogger("bridges.route").warning("%s", echo)
                    error = ValueError(echo)
                    for where, text in (
                        ("dead letter / error", one_line(error)),
                        ("cut", redact_cut(echo, 10_000)),
                    ):
                        core = _core(name, form, secret)
                        assert core not in text, (name, form, where, text)
                        assert MASK in text, (name, where, text)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    logged = out.getvalue()
    lines = logged.splitlines()
    assert len(lines) == 2 * len(forms)
    for line, (name, form) in zip(lines, [*forms.items(), *forms.items()], strict=True):
        message = json.loads(line)["message"] if line.startswith("{") else line
        assert _core(name, form, secret) not in message, (name, form, line)
        assert MASK in message, (name, line)


def test_the_forms_the_issue_found_unmasked() -> None:
    redactor = Redactor()
    redactor.add(["open sesame/42"])
    for echoed in (
        '{"password": "open sesame\\/42"}',
        "q=open%20sesame%2f42",
        "GET /hook?q=open%20sesame/42",
        "q=open+sesame%2F42",
    ):
        assert "sesame" not in redactor.redact(echoed), echoed
