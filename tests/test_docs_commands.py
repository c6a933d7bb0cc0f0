"""Every command README.md and the site's pages (docs/) show works as written.

How the commands are found and checked, and what is not checked and why
(``UNCHECKED``), is in :mod:`docs_kit`. A failure lists every broken command
with its README line and what is wrong with it.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path

import pytest
from docs_kit import (
    DOCUMENTS,
    ROOT,
    Checked,
    bench_problems,
    exists_in_repo,
    link_problems,
    named_paths,
    readme_commands,
    run_problem,
    simple_commands,
)

import bridges


@pytest.fixture(scope="module")
def checked() -> Checked:
    checked = Checked()
    for readme in DOCUMENTS:
        for command in readme_commands(readme):
            checked.check(command)
    return checked


def test_every_readme_command_has_its_program_paths_and_arguments(checked: Checked) -> None:
    problems = checked.problems + list(bench_problems(checked.bench))
    assert not problems, "README commands that do not work as written:\n" + "\n".join(problems)


def test_the_quick_and_safe_readme_commands_run_as_written(checked: Checked) -> None:
    ran = {argv[1] for _, argv in checked.runs if len(argv) > 1}
    assert {"check", "plugins"} <= ran  # the READMEs show both; else the sweep found nothing
    failed = {argv: run_problem(list(argv)) for argv in {tuple(argv) for _, argv in checked.runs}}
    problems = [f"{c}: {failed[tuple(argv)]}" for c, argv in checked.runs if failed[tuple(argv)]]
    assert not problems, "README commands that fail when run:\n" + "\n".join(problems)


def test_the_sweep_names_each_broken_command_with_its_line_and_what_is_wrong() -> None:
    text = "\n".join(
        [
            "Run `bridges check` first, then `bench/speed/receive.py --rounds many`.",  # 1
            "```sh",
            "bridges check CONFIG           # it's fine: a placeholder, a comment",
            "bridges run --no-such-flag x.toml",  # 4
            "echo hi | trio-stomp lsiten /queue/a",  # 5
            "no-such-program-here --go",  # 6
            ".venv/bin/python bench/nope.py \\",  # 7
            "    --flag",
            "sudo rm -rf /nothing",
            "/opt/b/bin/bridges run /etc/b.toml",
            "```",
            "```",
            "bridges_route_received_total 6.0",  # a metric, not a command
            "trio-stomp broker --listen 127.0.0.1:0 [--users users.txt]",  # 13
            "```",
        ]
    )
    checked = Checked()
    for command in readme_commands("R.md", text):
        checked.check(command)
    problems = checked.problems + list(bench_problems(checked.bench))
    assert [p.split(": ", 1)[0] for p in problems] == [
        "R.md:4",
        "R.md:5",
        "R.md:6",
        "R.md:7",
        "R.md:1",
    ]
    assert "unrecognized arguments: --no-such-flag" in problems[0]
    assert "invalid choice: 'lsiten'" in problems[1]
    assert "no-such-program-here: no such program" in problems[2]
    assert "`.venv/bin/python bench/nope.py --flag`: bench/nope.py does not exist" in problems[3]
    assert "bench/speed/receive.py: the parser says:" in problems[4]
    assert "--rounds: invalid int value: 'many'" in problems[4]
    assert [(str(c), why.split()[0]) for c, why in checked.skipped] == [
        ("R.md:9: `sudo rm -rf /nothing`", "changes"),
        ("R.md:10: `/opt/b/bin/bridges run /etc/b.toml`", "/opt/b/bin/bridges:"),
    ]
    assert [argv for _, argv in checked.runs] == [["bridges", "check", "CONFIG"]]


def test_every_path_and_link_of_the_readmes_exists() -> None:
    problems = list(itertools.chain.from_iterable(map(link_problems, DOCUMENTS)))
    named_anywhere = []
    for readme in DOCUMENTS:
        named = list(named_paths(readme))
        named_anywhere += named
        problems += [
            f"{readme}: {path} does not exist" for path in named if not exists_in_repo(path)
        ]
    assert "examples/quickstart.toml" in named_anywhere  # a literalinclude: the sweep sees them
    assert any(path.startswith("tests/") for path in named_anywhere)
    assert not problems, "doc paths that lead nowhere:\n" + "\n".join(problems)


def test_every_extra_is_named_in_the_readme_and_on_the_install_page() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    endpoint_extras = set(extras) - {"dev", "docs", "bench", "service", "http", "bridges"}
    readme = " ".join((ROOT / "README.md").read_text().split())
    sentence = readme[readme.index("Each further endpoint family has its extra") :][:300]
    table = (ROOT / "docs" / "howto" / "install.md").read_text()
    assert "kafka" in endpoint_extras
    missing = sorted(e for e in endpoint_extras if f"`{e}`" not in sentence)
    unlisted = sorted(e for e in extras if f"| `{e}` |" not in table and e not in ("dev", "docs"))
    assert not missing, f"README's list of extras lacks {missing}"
    assert not unlisted, f"docs/howto/install.md's table of extras lacks {unlisted}"


def test_the_complete_config_file_passes_check_with_and_without_a_durable_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "docs" / "howto" / "configure.md").read_text(encoding="utf-8")
    block = re.search(r"A complete file, with the keys.*?```toml\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/howto/configure.md: the complete config file is gone"
    durable = block.group(1).replace("embedded = false", "embedded = true")
    durable = durable.replace("# data_dir = ", "data_dir = ")
    monkeypatch.chdir(tmp_path)
    registry = bridges.default_registry(plugins=False)
    for name, config in (("defaults.toml", block.group(1)), ("durable.toml", durable)):
        (tmp_path / name).write_text(config)
        loaded = bridges.load_config(name, registry)
        routes = bridges.build_routes(loaded, registry, checking=True)
        assert [route.name for route in routes] == ["orders"], name
        assert loaded.broker.data_dir == ("state/broker" if name == "durable.toml" else None)


def test_the_sweep_reads_substitutions_loops_and_here_documents_as_a_shell_does() -> None:
    text = "\n".join(
        [
            "```sh",
            "SIG=$(printf '%s' \"$BODY\" | no-such-digest -x)",  # 2: the inner command
            'for f in examples/*.toml; do bridges check "$f"; done',
            "python - <<'EOF'",
            "{not a command}",
            "EOF",
            "$ trio-stomp listn /queue/a",  # 7: a prompt, then a typo
            "```",
        ]
    )
    commands = list(readme_commands("R.md", text))
    assert [c.line for c in commands] == [2, 3, 4, 7]
    assert simple_commands(commands[1].text) == [["bridges", "check", "$f"]]
    checked = Checked()
    for command in commands:
        checked.check(command)
    assert checked.runs == []  # not with a variable's value unknown
    assert [p.split(": ", 1)[0] for p in checked.problems] == ["R.md:2", "R.md:7"]
    assert "no-such-digest: no such program" in checked.problems[0]
    assert "invalid choice: 'listn'" in checked.problems[1]
