"""Every code block of README.md and of the site (docs/) runs, as a reader would run it.

How each kind of block runs, and what a marker above a block changes, is in
:mod:`snippet_kit`. Blocks that are not run say why in their ``skip`` marker;
this module's first test lists them.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from _pytest.mark import ParameterSet
from docs_kit import Block, split_page
from snippet_kit import (
    MARKERS,
    TUTORIALS,
    Tutorial,
    blocks,
    bridge_config,
    checkout_copy,
    free_listen,
    language,
    marker_problem,
    run_briefly,
    run_python,
    write_page_files,
)

import bridges

from conftest import REAL_BROKERS, require_real_broker

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests/bridges/endpoints" / name) for name in ("mqtt", "redis", "nats")]
sys.path[:0] = [str(ROOT / "tests/bridges/endpoints/amqp")]
from amqp_servers import require_amqp  # noqa: E402
from mqtt_servers import require_mqtt  # noqa: E402
from nats_servers import require_nats  # noqa: E402
from redis_servers import require_redis  # noqa: E402

BLOCKS = blocks()
NEEDS = {
    "rabbitmq": lambda: require_real_broker("rabbitmq"),
    "activemq": lambda: require_real_broker("activemq"),
    "mqtt": require_mqtt,
    "redis": require_redis,
    "nats": require_nats,
    "amqp": require_amqp,
}


def runnable(kind: str) -> list[ParameterSet]:
    """The blocks of one language that run on their own (not skipped, saved or run elsewhere)."""
    return [
        pytest.param(block, id=f"{block.page}:{block.line}")
        for block in BLOCKS
        if language(block) == kind
        and block.marker not in ("skip", "file", "example")
        and not (kind == "toml" and block.page.startswith(TUTORIALS))
    ] + [
        pytest.param(block, id=f"{block.page}:{block.line}")
        for block in BLOCKS
        if kind == language(block) == "toml"
        and block.marker == "file"
        and not block.page.startswith(TUTORIALS)
    ]


TUTORIAL_PAGES = sorted(
    {b.page for b in BLOCKS if b.page.startswith(TUTORIALS) and language(b) == "sh"}
)


def test_every_block_runs_or_says_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    problems = [f"{b.page}:{b.line}: {p}" for b in BLOCKS if (p := marker_problem(b))]
    assert not problems, "blocks the snippet tests cannot run as marked:\n" + "\n".join(problems)
    assert {b.marker for b in BLOCKS} <= {"", *MARKERS}
    assert {"python", "toml", "sh"} <= {language(b) for b in BLOCKS}  # the sweep sees them
    with capsys.disabled():
        for block in BLOCKS:
            if block.marker == "skip":
                print(f"\nnot run: {block.page}:{block.line}: {block.argument}", end="")
        print()


@pytest.mark.parametrize("block", runnable("python"))
def test_a_python_block_runs(block: Block, tmp_path: Path) -> None:
    if block.marker == "needs":
        NEEDS[block.argument]()
    done = run_python(block, tmp_path)
    assert done.returncode == 0, f"{block.page}:{block.line}:\n{done.stdout}{done.stderr}"


@pytest.mark.parametrize("block", runnable("toml"))
def test_a_bridge_config_passes_check_and_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_page_files(block.page, tmp_path)  # a python transform the page has you save, say
    monkeypatch.syspath_prepend(str(tmp_path))
    text, env = bridge_config(block, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    config_file = tmp_path / "snippet-bridge.toml"
    config_file.write_text(text, encoding="utf-8")
    registry = bridges.default_registry(plugins=False)
    try:
        config = bridges.load_config(config_file, registry)
        assert bridges.build_routes(config, registry, checking=True)
    except bridges.ConfigError as exc:
        pytest.fail(f"{block.page}:{block.line}: bridges check says:\n{exc}\n\n{text}")
    if config.broker.embedded:
        taken = {urlsplit(url).port for url in REAL_BROKERS.values()}
        assert "[broker]" not in block.text or config.broker.address[1] not in taken, (
            f"{block.page}:{block.line}: the embedded broker listens on "
            f"{config.broker.listen}, a real broker's port (scripts/brokers): "
            "a reader who has one gets 'Address already in use'; name a free `listen`"
        )
        config_file.write_text(free_listen(text), encoding="utf-8")
        problem = run_briefly(config_file, env)
        assert problem is None, f"{block.page}:{block.line}: {problem}"


@pytest.mark.parametrize("page", TUTORIAL_PAGES)
def test_a_tutorial_runs_as_written_from_a_clean_checkout(page: str, tmp_path: Path) -> None:
    tutorial = Tutorial(page, checkout_copy(tmp_path))
    tutorial.run()
    assert tutorial.ran, page


def test_the_snippet_tests_catch_what_a_reader_would_trip_on(tmp_path: Path) -> None:
    page = "\n".join(
        [
            "```python",  # 2: fails when run
            "import trio_stomp",
            "trio_stomp.no_such_thing()",
            "```",
            "<!-- test: nedds: rabbitmq -->",  # a misspelt marker
            "```python",
            "```",
            "<!-- test: skip -->",  # no reason
            "```sh",
            "```",
            "```ini",  # a language nothing runs
            "```",
            "```",  # plain: output, or commands checked elsewhere
            "```",
            "```toml",  # a fragment: one source
            "[routes.r.source]",
            'type = "stomp"',
            'url = "embedded"',
            'destination = "/queue/a"',
            'passcode_file = "/run/secrets/stomp"',
            "```",
        ]
    )
    found, _ = split_page("docs/howto/x.md", page)
    assert [marker_problem(b) is not None for b in found] == [False, True, True, True, False, False]
    failed = run_python(found[0], tmp_path)
    assert failed.returncode == 1
    assert "no_such_thing" in failed.stderr
    text, env = bridge_config(found[-1], tmp_path)
    completed = tomllib.loads(text)
    assert completed["broker"] == {"embedded": True}  # the fragment's url needs one
    assert completed["routes"]["r"]["sink"] == {"type": "file", "path": "snippet-sink"}
    secret = Path(completed["routes"]["r"]["source"]["passcode_file"])
    assert secret.is_relative_to(tmp_path)
    assert secret.read_text()
    assert env == {}
