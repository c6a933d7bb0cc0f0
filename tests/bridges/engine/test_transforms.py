"""Built-in transforms, templates and Python callables."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridges import Context, InvalidSetting, Message, Template, TemplateError
from bridges._template import safe_filename
from bridges._transforms import (
    DestinationConfig,
    Filter,
    FilterConfig,
    JsonExtract,
    JsonExtractConfig,
    PythonConfig,
    RemoveHeaders,
    RemoveHeadersConfig,
    RenameHeaders,
    RenameHeadersConfig,
    SetDestination,
    SetHeaders,
    SetHeadersConfig,
    build_python,
)

CTX = Context(route="t", role="transform")
names = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="{}|:"), min_size=1)
headers = st.dictionaries(names, st.text(max_size=10), max_size=6)


def msg(body: bytes = b"", **kw: str) -> Message:
    return Message(body, kw, "id-1")


def test_templates_fill_in_id_destination_and_headers() -> None:
    template = Template.parse("/queue/{header:region}.{id}{{x}}{header:tier|gold}")
    message = Message(b"", {"region": "eu"}, "42", destination="/queue/old")
    assert template.render(message) == "/queue/eu.42{x}gold"
    assert Template.parse("{destination}").render(message) == "/queue/old"
    assert Template.parse("plain").constant
    assert not template.constant
    with pytest.raises(TemplateError, match="no 'region' header"):
        Template.parse("{header:region}").render(msg())
    for bad in ("{nope}", "{header:}", "a}b", "{", "{id|x}"):
        with pytest.raises(TemplateError):
            Template.parse(bad)


@given(st.text(max_size=30))
def test_a_template_without_braces_renders_as_itself(text: str) -> None:
    literal = text.replace("{", "{{").replace("}", "}}")
    assert Template.parse(literal).render(msg()) == text


@given(st.text(max_size=300))
def test_safe_filenames_are_one_plain_name(name: str) -> None:
    safe = safe_filename(name)
    assert safe
    assert "/" not in safe
    assert "\0" not in safe
    assert not safe.startswith(".")
    assert len(safe) <= 200


@given(headers, headers)
def test_set_headers_adds_and_overwrites_unless_told_not_to(
    before: dict[str, str], new: dict[str, str]
) -> None:
    literal = {k: v.replace("{", "{{").replace("}", "}}") for k, v in new.items()}
    message = Message(b"b", before, "i")
    out = SetHeaders.build(SetHeadersConfig(literal), CTX)(message)
    assert out.headers == {**before, **new}
    keep = SetHeaders.build(SetHeadersConfig(literal, overwrite=False), CTX)(message)
    assert keep.headers == {**new, **before}
    assert message.headers == before  # values: the input is not changed


@given(headers, st.lists(names, max_size=4))
def test_remove_headers_removes_exactly_those(before: dict[str, str], gone: list[str]) -> None:
    out = RemoveHeaders.build(RemoveHeadersConfig(tuple(gone)), CTX)(Message(b"", before, "i"))
    assert out.headers == {k: v for k, v in before.items() if k not in gone}


@given(headers, st.dictionaries(names, names, max_size=3))
def test_rename_headers_keeps_every_value_under_its_new_name(
    before: dict[str, str], renames: dict[str, str]
) -> None:
    out = RenameHeaders.build(RenameHeadersConfig(renames), CTX)(Message(b"", before, "i"))
    for old, value in before.items():
        assert out.headers[renames.get(old, old)] in {value, *before.values()}
    assert not any(
        old in out.headers for old in renames if old in before and old not in renames.values()
    )


def test_destination_comes_from_a_template() -> None:
    transform = SetDestination.build(DestinationConfig("/queue/orders.{header:region}"), CTX)
    assert transform(msg(region="eu")).destination == "/queue/orders.eu"
    with pytest.raises(InvalidSetting, match="template"):
        SetDestination.build(DestinationConfig("{what}"), CTX)


@pytest.mark.parametrize(
    ("config", "value", "kept"),
    [
        (FilterConfig("type", equals="order"), "order", True),
        (FilterConfig("type", equals="order"), "refund", False),
        (FilterConfig("type", equals="order"), None, False),
        (FilterConfig("type", equals=("a", "b")), "b", True),
        (FilterConfig("type", matches="ord.*"), "order", True),
        (FilterConfig("type", matches="ord"), "order", False),
        (FilterConfig("type", present=True), "", True),
        (FilterConfig("type", present=False), None, True),
        (FilterConfig("type", equals="order", action="drop"), "order", False),
        (FilterConfig("type", equals="order", action="drop"), "other", True),
    ],
)
def test_filter_keeps_or_drops_by_one_header(
    config: FilterConfig, value: str | None, kept: bool
) -> None:
    message = msg() if value is None else msg(type=value)
    assert (Filter.build(config, CTX)(message) is not None) == kept


def test_filter_needs_exactly_one_test() -> None:
    for config in (FilterConfig("x"), FilterConfig("x", equals="a", present=True)):
        with pytest.raises(InvalidSetting, match="exactly one"):
            Filter.build(config, CTX)
    with pytest.raises(InvalidSetting, match="matches"):
        Filter.build(FilterConfig("x", matches="("), CTX)


def test_json_extract_copies_fields_into_headers() -> None:
    body = json.dumps({"order": {"id": 7, "lines": [{"sku": "A1"}]}, "who": "bo"}).encode()
    config = JsonExtractConfig(
        {"order-id": "order.id", "sku": "order.lines.0.sku", "w": "who", "gone": "order.nope"}
    )
    out = JsonExtract.build(config, CTX)(msg(body, keep="1"))
    assert out.headers == {"keep": "1", "order-id": "7", "sku": "A1", "w": "bo"}
    assert JsonExtract.build(config, CTX)(msg(b"not json")).headers == {}
    strict = JsonExtract.build(attrs.evolve(config, required=True), CTX)
    with pytest.raises(ValueError, match=r"no 'order\.nope'"):
        strict(msg(body))
    with pytest.raises(ValueError, match="not JSON"):
        strict(msg(b"{"))


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_json_extract_of_the_whole_document_never_fails(document: Any) -> None:
    body = json.dumps({"d": document}).encode()
    out = JsonExtract.build(JsonExtractConfig({"h": "d"}), CTX)(msg(body))
    expected = (
        document if isinstance(document, str) else json.dumps(document, separators=(",", ":"))
    )
    assert out.headers["h"] == expected


def upper(message: Message) -> Message:
    """A transform for the python tests."""
    return attrs.evolve(message, body=message.body.upper())


def make_tagger(tag: str) -> Any:
    """A transform factory for the python tests."""
    return lambda message: attrs.evolve(message, headers={**message.headers, "tag": tag})


def test_python_callables_and_factories_are_imported_by_name() -> None:
    function = build_python(PythonConfig(callable=f"{__name__}:upper"), CTX)
    assert function(msg(b"abc")).body == b"ABC"  # type: ignore[union-attr]
    made = build_python(PythonConfig(factory=f"{__name__}:make_tagger", options={"tag": "x"}), CTX)
    assert made(msg()).headers["tag"] == "x"  # type: ignore[union-attr]
    for config, match in [
        (PythonConfig(), "exactly one"),
        (PythonConfig(callable="nocolon"), "package.module:name"),
        (PythonConfig(callable="no_such_module_xyz:f"), "cannot import"),
        (PythonConfig(callable=f"{__name__}:upper", options={"a": 1}), "options go with"),
        (PythonConfig(factory=f"{__name__}:make_tagger", options={"bad": 1}), "failed"),
    ]:
        with pytest.raises(InvalidSetting, match=match):
            build_python(config, CTX)
