"""The built documentation site: offline, complete, and working in a browser.

The site is built once per session by ``scripts/docs`` (warnings are errors,
cross-references nitpicky), or taken as ``scripts/test`` just built it
(``STOMP_DOCS_BUILT=1``). Then:

- no page loads a script, style sheet or font from the network;
- the config reference shows every key of the schema, with its default;
- headless Chromium (Debian's ``chromium``) opens the home page, the config
  reference, the API entry of ``trio_stomp.connect`` and the performance
  pages: no console error, no image that did not load, every plot of
  ``docs/performance/data/`` shown; and the site's search finds ``connect``.
  A screenshot of each is kept in ``build/site-screenshots/`` (not in git),
  whose path the test prints.

Without Chromium the browser test skips, except under
``STOMP_REQUIRE_BROKERS=1`` (CI), where it fails: CI never silently skips.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from collections.abc import Iterator
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import trio

import config_schema  # (docs/_ext: pytest's pythonpath)
from config_reference import option_id, table_id

from chromium_kit import chromium_path, open_chromium
from site_server import serve_site

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docs" / "_build" / "html"
SCREENSHOTS = ROOT / "build" / "site-screenshots"


@pytest.fixture(scope="session")
def site() -> Path:
    """The built site (``scripts/docs``, once per session)."""
    if os.environ.get("STOMP_DOCS_BUILT") != "1" or not (SITE / "index.html").exists():
        done = subprocess.run(
            [ROOT / "scripts" / "docs"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"scripts/docs failed:\n{done.stdout}\n{done.stderr}"
    return SITE


class _Assets(HTMLParser):
    """The URLs a page loads as scripts, style sheets, fonts and images."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in ("script", "img", "iframe") and values.get("src"):
            self.loaded.append(values["src"] or "")
        if tag == "link" and values.get("href") and values.get("rel") != "canonical":
            self.loaded.append(values["href"] or "")


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    remote: dict[str, list[str]] = {}
    for page in site.rglob("*.html"):
        parser = _Assets()
        parser.feed(page.read_text())
        found = [url for url in parser.loaded if re.match(r"(https?:)?//", url)]
        if found:
            remote[str(page.relative_to(site))] = found
    for sheet in site.rglob("*.css"):
        remote_url = r"""(?:@import|url\()\s*["']?((?:https?:)?//[^"')\s]+)"""
        found = re.findall(remote_url, sheet.read_text())
        if found:
            remote[str(sheet.relative_to(site))] = found
    assert remote == {}


def test_the_config_reference_shows_every_key_with_its_default(site: Path) -> None:
    page = (site / "reference" / "config.html").read_text()
    missing = []
    for table in config_schema.schema():
        if f'id="{table_id(table)}"' not in page:
            missing.append(table.title)
        for option in table.options:
            row = re.search(rf'id="{option_id(table, option)}".*?</tr>', page, re.DOTALL)
            if row is None:
                missing.append(f"{table.title}: {option.name}")
            elif option.default is not None and option.default not in _text(row.group(0)):
                missing.append(f"{table.title}: {option.name}: default {option.default}")
    assert missing == []


def _options(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, str]]:
    """``(program, option)`` for every option and positional of ``parser`` and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{prog} {name}")
        elif isinstance(action, argparse._HelpAction):
            continue
        elif action.option_strings:
            yield from ((prog, option) for option in action.option_strings)
        else:
            yield prog, f"arg-{action.metavar or action.dest.upper()}"


def test_the_cli_reference_shows_every_option_of_both_commands(site: Path) -> None:
    from bridges._cli import build_parser as bridges_parser
    from trio_stomp.cli._main import build_parser as trio_stomp_parser

    page = (site / "reference" / "cli.html").read_text()
    missing = []
    for parser in (trio_stomp_parser(), bridges_parser()):
        for prog, option in _options(parser, parser.prog):
            anchor = f"cmdoption-{prog.replace(' ', '-')}-{option.lstrip('-')}"
            if f'id="{anchor}"' not in page:
                missing.append(f"{prog} {option}")
    assert missing == []


def _text(html: str) -> str:
    """What a reader sees of ``html``: tags dropped, entities read, spaces as one."""
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


def _plots() -> set[str]:
    """The plots the performance pages must show: one per bench's data file."""
    return {f"{data.stem}.png" for data in (ROOT / "docs" / "performance" / "data").glob("*.json")}


@pytest.mark.deadline(60)
async def test_the_site_in_a_browser(site: Path) -> None:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("STOMP_REQUIRE_BROKERS") == "1":
            pytest.fail("chromium is not installed (scripts/test installs Debian's package)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}
    shown: set[str] = set()
    async with trio.open_nursery() as nursery, open_chromium(executable) as page:
        base = await nursery.start(serve_site, site)

        async def visit(name: str, path: str) -> None:
            page.errors.clear()
            await page.open(base + path)
            with trio.move_on_after(5):  # lazy images: give them a moment
                await page.wait_for("Array.from(document.images).every(i => i.complete)")
            broken = await page.evaluate(
                "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
                ".map(i => i.src)"
            )
            names = await page.evaluate("Array.from(document.images).map(i => i.src)")
            shown.update(src.rpartition("/")[2] for src in names if src not in broken)
            problems[name] = [*page.errors, *(f"image not loaded: {src}" for src in broken)]
            await page.evaluate(  # (the window at the URL's anchor, as a reader sees it)
                "location.hash && document.getElementById(location.hash.slice(1))"
                '?.scrollIntoView({behavior: "instant"})'
            )
            await page.screenshot(SCREENSHOTS / f"{name}.png")

        await visit("home", "index.html")
        assert "trio-stomp" in await page.evaluate("document.title")
        await visit("config", "reference/config.html")
        assert await page.evaluate("document.getElementById('config-source-stomp-url') !== null")
        await visit("connect", "reference/api/trio_stomp.html#trio_stomp.connect")
        entry = await page.evaluate("document.getElementById('trio_stomp.connect').textContent")
        assert "async with" in entry
        for performance in sorted((site / "performance").glob("*.html")):
            await visit(f"performance-{performance.stem}", str(performance.relative_to(site)))
        await visit("search", "search.html?q=connect")
        with trio.fail_after(15):
            links = await page.wait_for(
                "Array.from(document.querySelectorAll('#search-results li a')).map(a => a.href)"
                ".filter(h => h.length)"
            )
        problems["search"] += page.errors
        nursery.cancel_scope.cancel()  # (the server)
    print(f"\nsite screenshots: {SCREENSHOTS}")
    assert {name: found for name, found in problems.items() if found} == {}
    assert any("trio_stomp.connect" in link for link in links), links
    assert _plots() <= shown, f"plots not shown: {sorted(_plots() - shown)}"
