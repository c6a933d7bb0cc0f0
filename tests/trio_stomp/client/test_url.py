"""Broker URLs: schemes, defaults, credentials, and what is refused."""

from __future__ import annotations

import pytest

from trio_stomp._url import DEFAULT_PORT, DEFAULT_TLS_PORT, Endpoint


def test_defaults_without_a_url() -> None:
    endpoint = Endpoint()
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", 61613)
    assert (endpoint.transport, endpoint.tls, endpoint.path) == ("tcp", False, "/")
    assert endpoint.url == "stomp://127.0.0.1:61613"


@pytest.mark.parametrize(
    ("url", "transport", "tls", "port"),
    [
        ("stomp://broker.example", "tcp", False, 61613),
        ("tcp://broker.example", "tcp", False, 61613),
        ("stomp+ssl://broker.example", "tcp", True, 61614),
        ("ssl://broker.example", "tcp", True, 61614),
        ("stomps://broker.example", "tcp", True, 61614),
        ("ws://broker.example", "websocket", False, 80),
        ("wss://broker.example", "websocket", True, 443),
        ("STOMP+SSL://broker.example", "tcp", True, 61614),
    ],
)
def test_scheme_picks_transport_tls_and_default_port(
    url: str, transport: str, tls: bool, port: int
) -> None:
    endpoint = Endpoint.from_url(url)
    assert (endpoint.host, endpoint.transport, endpoint.tls, endpoint.port) == (
        "broker.example",
        transport,
        tls,
        port,
    )
    assert (DEFAULT_PORT, DEFAULT_TLS_PORT) == (61613, 61614)


def test_explicit_port_and_everything_else() -> None:
    endpoint = Endpoint.from_url("stomp://guest:secret@10.0.0.7:1234/?vhost=/prod")
    assert endpoint == Endpoint(
        host="10.0.0.7", port=1234, login="guest", passcode="secret", vhost="/prod"
    )
    assert endpoint.url == "stomp://10.0.0.7:1234"


def test_websocket_path_is_kept() -> None:
    endpoint = Endpoint.from_url("ws://guest:guest@127.0.0.1:15674/ws?vhost=/")
    assert (endpoint.port, endpoint.path, endpoint.vhost) == (15674, "/ws", "/")
    assert endpoint.url == "ws://127.0.0.1:15674/ws"
    assert Endpoint.from_url("wss://h").path == "/"
    assert Endpoint.from_url("wss://h/stomp/x").url == "wss://h:443/stomp/x"


def test_credentials_are_percent_decoded() -> None:
    endpoint = Endpoint.from_url("stomp://us%40er%3A1:p%3Ass%2Fw%40rd%20x@host")
    assert (endpoint.login, endpoint.passcode) == ("us@er:1", "p:ss/w@rd x")


def test_login_without_passcode_and_empty_passcode() -> None:
    assert Endpoint.from_url("stomp://guest@h").passcode is None
    assert Endpoint.from_url("stomp://guest:@h").passcode == ""
    assert Endpoint.from_url("stomp://h").login is None


def test_vhost_is_percent_decoded_and_may_be_empty() -> None:
    assert Endpoint.from_url("stomp://h/?vhost=%2Fa%20b").vhost == "/a b"
    assert Endpoint.from_url("stomp://h?vhost=").vhost == ""
    assert Endpoint.from_url("stomp://h").vhost is None


def test_ipv6_host() -> None:
    endpoint = Endpoint.from_url("stomp+ssl://[::1]:7000")
    assert (endpoint.host, endpoint.port) == ("::1", 7000)
    assert endpoint.url == "stomp+ssl://[::1]:7000"


def test_missing_host_means_loopback() -> None:
    assert Endpoint.from_url("stomp://:7000").host == "127.0.0.1"


def test_passcode_stays_out_of_repr() -> None:
    endpoint = Endpoint.from_url("stomp://guest:hunter2@h")
    assert "hunter2" not in repr(endpoint)
    assert "guest" in repr(endpoint)


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://h:1", "unsupported URL scheme 'http'"),
        ("amqp://h", "unsupported URL scheme"),
        ("h:61613", "unsupported URL scheme"),
        ("stomp://h:99999", "bad port"),
        ("stomp://h:abc", "bad port"),
        ("stomp://h:0", "port 0"),
        ("stomp://h/queue", "unexpected path '/queue'"),
        ("stomp+ssl://h/x", "only ws:// and wss:// URLs have a path"),
        ("stomp://h/#frag", "fragment"),
        ("stomp://h/?vhots=/", r"unknown URL parameter\(s\) \['vhots'\]"),
        ("ws://h/ws?token=x", "unknown URL parameter"),
        ("stomp://h/?vhost=a&vhost=b", "'vhost' given 2 times"),
    ],
)
def test_bad_urls_are_refused(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Endpoint.from_url(url)


def test_errors_do_not_show_the_passcode() -> None:
    with pytest.raises(ValueError) as info:
        Endpoint.from_url("stomp://guest:hunter2@h/?nope=1")
    assert "hunter2" not in str(info.value)
    assert "guest:***@h" in str(info.value)
