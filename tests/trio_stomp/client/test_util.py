"""trio_stomp.util: the helpers bridges shares with the client (one copy each)."""

from __future__ import annotations

import json
import random
from urllib.parse import quote

import pytest
import trio
from hypothesis import assume, given
from hypothesis import strategies as st

import trio_stomp
from trio_stomp.util import (
    Endpoint,
    backoff_delay,
    bracket_host,
    format_host_port,
    parse_host_port,
    printable,
    redact_url,
    unwrap_group,
)

# Passcodes made of what breaks naive redaction: URL delimiters and escapes.
SECRETS = st.text(alphabet="/@:%?#&=+ abcXYZ019é", min_size=6, max_size=24).filter(
    lambda s: len(set(s)) >= 3
)


@given(passcode=SECRETS)
def test_redact_url_never_shows_the_passcode_as_typed(passcode: str) -> None:
    url = f"stomp://guest:{passcode}@broker.example:61613/?vhost=/"
    shown = redact_url(url)
    assume(passcode not in url.replace(passcode, ""))  # e.g. "example" inside the host
    assert passcode not in shown
    assert shown.startswith("stomp://guest:***@")


@given(passcode=SECRETS)
def test_a_percent_escaped_passcode_round_trips_and_stays_hidden(passcode: str) -> None:
    url = f"stomp://guest:{quote(passcode, safe='')}@broker.example:61613/?vhost=/"
    endpoint = Endpoint.from_url(url)
    assert endpoint.passcode == passcode
    assert endpoint.login == "guest"
    assert passcode not in endpoint.url
    assert passcode not in repr(endpoint)
    assert "guest" not in endpoint.url


@given(passcode=SECRETS, rest=st.sampled_from(["/?nope=1", ":99999/", "/queue", "/#f", "/"]))
def test_url_errors_never_show_the_passcode(passcode: str, rest: str) -> None:
    url = f"stomp://guest:{passcode}@h{rest}"
    assume(passcode not in url.replace(passcode, "", 1))
    shown = ""
    try:
        shown = Endpoint.from_url(url).url  # it parsed: the passcode is not in what is shown
    except ValueError as exc:
        shown = str(exc)
    assert passcode not in shown


def test_an_at_sign_after_the_host_is_refused_not_guessed() -> None:
    # "/" ends the authority: "12" would be the port and "Zq9@host/ws" the path.
    with pytest.raises(ValueError, match="percent-escape") as info:
        Endpoint.from_url("ws://u:12/Zq9@host/ws")
    assert "Zq9" not in str(info.value)
    assert "12" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:61613", ("127.0.0.1", 61613)),
        ("broker:0", ("broker", 0)),
        ("[::1]:61613", ("::1", 61613)),
        ("[fe80::1%eth0]:1", ("fe80::1%eth0", 1)),
    ],
)
def test_parse_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("61613", "expected HOST:PORT"),
        ("host:", "expected HOST:PORT"),
        ("host:x", "expected HOST:PORT"),
        ("host:٣", "expected HOST:PORT"),  # a digit, but not ASCII
        (":61613", "no host"),
        ("::1:61613", "needs brackets"),
        ("[::1:61613", "expected \\[IPV6\\]:PORT"),
        ("[]:1", "expected \\[IPV6\\]:PORT"),
        ("host:65536", "out of range"),
    ],
)
def test_parse_host_port_refuses(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_host_port(text)


def test_parse_host_port_default_host() -> None:
    assert parse_host_port(":61613", default_host="127.0.0.1") == ("127.0.0.1", 61613)


HOSTS = st.one_of(
    st.ip_addresses().map(str),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True),
)


@given(host=HOSTS, port=st.integers(0, 65535))
def test_format_and_parse_host_port_round_trip(host: str, port: int) -> None:
    text = format_host_port(host, port)
    assert parse_host_port(text) == (host, port)
    assert bracket_host(host) == (f"[{host}]" if ":" in host else host)


@given(
    attempt=st.integers(-5, 10**6),
    initial=st.floats(0, 100),
    maximum=st.floats(0, 1000),
    multiplier=st.floats(1, 10),
    jitter=st.floats(0, 1),
    r=st.floats(0, 1, exclude_max=True),
)
def test_backoff_delay_stays_within_its_bounds(
    attempt: int, initial: float, maximum: float, multiplier: float, jitter: float, r: float
) -> None:
    delay = backoff_delay(
        attempt,
        initial=initial,
        maximum=maximum,
        multiplier=multiplier,
        jitter=jitter,
        rand=lambda: r,
    )
    bound = min(maximum, initial * multiplier ** min(max(attempt - 1, 0), 64))
    assert 0 <= delay <= maximum
    assert bound * (1 - jitter) - 1e-9 <= delay <= bound + 1e-9


def test_backoff_delay_grows_then_caps() -> None:
    delays = [
        backoff_delay(n, initial=0.1, maximum=1.0, multiplier=2.0, jitter=0.0) for n in range(1, 7)
    ]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


@given(attempt=st.integers(1, 10**4), seed=st.integers(0, 2**32))
def test_reconnect_follows_the_shared_curve(attempt: int, seed: int) -> None:
    policy = trio_stomp.Reconnect(initial_delay=0.1, max_delay=5.0, multiplier=3.0)
    expected = backoff_delay(
        attempt,
        initial=0.1,
        maximum=5.0,
        multiplier=3.0,
        jitter=1.0,
        rand=random.Random(seed).random,
    )
    assert policy.delay(attempt, random.Random(seed)) == expected


def test_unwrap_group() -> None:
    leaf = KeyError("x")
    assert unwrap_group(ExceptionGroup("a", [ExceptionGroup("b", [leaf])])) is leaf
    assert unwrap_group(leaf) is leaf
    several = ExceptionGroup("a", [KeyError("x"), ValueError("y")])
    assert unwrap_group(several) is several
    nested = ExceptionGroup("a", [several])
    assert unwrap_group(nested) is several


@pytest.mark.parametrize("passcode", [b"s3cret-bytes", 424242, ["s3cret"]])
async def test_a_passcode_of_the_wrong_type_is_not_echoed(passcode: object) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    with pytest.raises(TypeError) as info:
        async with trio_stomp.wrap_stream(client_end, passcode=passcode):  # type: ignore[arg-type]  # the point of the test
            pass
    assert "s3cret" not in str(info.value)
    assert "424242" not in str(info.value)
    assert "passcode" in str(info.value)
    assert await server_end.receive_some() == b""  # the stream was closed, as documented


@pytest.mark.parametrize("passcode", [b"s3cret-bytes", 424242])
async def test_connect_with_a_wrong_type_passcode_is_not_echoed(passcode: object) -> None:
    with pytest.raises(TypeError) as info:
        async with trio_stomp.connect(
            "stomp://127.0.0.1:1",
            passcode=passcode,  # type: ignore[arg-type]  # the point of the test
        ):
            pass
    assert "s3cret" not in str(info.value)
    assert "424242" not in str(info.value)


def test_connection_options_never_show_the_passcode() -> None:
    from trio_stomp._connect import Options

    assert "s3cret" not in repr(Options(login="guest", passcode="s3cret"))


# -- printable ------------------------------------------------------------------------------

#: What a terminal obeys or a viewer reorders: C0, DEL, C1, bidi controls, line separators.
UNPRINTABLE_CHARS = [
    *map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u061c", "\u200e", "\u200f",
    "\u2028", "\u2029", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)),
    "\udc9b",
]  # fmt: skip


@given(st.text(alphabet=st.sampled_from(UNPRINTABLE_CHARS) | st.characters(), max_size=40))
def test_printable_leaves_no_control_character_and_reads_like_repr(text: str) -> None:
    shown = printable(text)
    assert not any(char in shown for char in UNPRINTABLE_CHARS)
    shown.encode("utf-8")  # (a lone surrogate would raise here)
    assert printable(shown) == shown  # escaping twice changes nothing
    if "\\" not in text and "'" not in text and text.isprintable() is False:
        # Each escape is the one repr writes, so a value quoted with %r reads the same.
        assert all(
            repr(char)[1:-1] == printable(char) for char in text if char in UNPRINTABLE_CHARS
        )
    json_style = printable(json.dumps(text, ensure_ascii=False), style="json")
    assert json.loads(json_style) == text
    assert not any(char in json_style for char in UNPRINTABLE_CHARS)


def test_printable_keeps_what_it_is_told_to_and_plain_text() -> None:
    assert printable("a\x1b]0;t\x07\nb", keep="\n") == "a\\x1b]0;t\\x07\nb"
    assert printable('/queue/ordres é 中 \\ "x"') == '/queue/ordres é 中 \\ "x"'
