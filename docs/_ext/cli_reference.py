"""``.. argparse-cli:: module:function``: a command's reference, from its real parser.

``function()`` returns the :class:`argparse.ArgumentParser` the command
parses its arguments with (``trio_stomp.cli._main:build_parser``,
``bridges._cli:build_parser``). The page gets its usage, description and
every option (an ``.. option::`` each, so ``:option:`` finds them), then a
section per subcommand, the same way: what ``--help`` says, nothing typed
twice.
"""

from __future__ import annotations

import argparse
import importlib
import re
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

#: reStructuredText's inline markup characters, escaped in help texts.
_MARKUP = re.compile(r"([\\`*_|\[\]])")


def _text(text: str) -> str:
    return _MARKUP.sub(r"\\\1", text)


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    formatter = argparse.HelpFormatter("x")
    metavar = formatter._format_args(action, action.dest.upper())
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def _block(text: str, raw: bool) -> list[str]:
    """A description or epilog: kept as written when the parser keeps it so (raw)."""
    if not text:
        return []
    if raw:
        return ["::", "", *(f"   {line}" for line in text.splitlines()), ""]
    return [_text(" ".join(text.split())), ""]


def render(parser: argparse.ArgumentParser, prog: str, underline: str) -> list[str]:
    """reStructuredText of ``parser``: usage, description, options, subcommands, epilog."""
    kept = argparse.RawDescriptionHelpFormatter
    raw = isinstance(parser.formatter_class, type) and issubclass(parser.formatter_class, kept)
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines = [f".. program:: {prog}", "", ".. code-block:: text", ""]
    lines += [*(f"   {u}" for u in usage.splitlines()), ""]
    lines += _block(parser.description or "", raw)
    subparsers = _subparsers(parser)
    for action in parser._actions:
        if action is subparsers or isinstance(action, argparse._HelpAction):
            continue
        lines += [f".. option:: {_invocation(action)}", ""]
        help_text = _help(parser, action)
        if action.choices is not None and "choices" not in help_text:
            help_text += f" (one of: {', '.join(map(str, action.choices))})"
        lines += [f"   {_text(help_text.strip())}" if help_text.strip() else "", ""]
    lines += _block(parser.epilog or "", raw)
    if subparsers is not None:
        helps = {choice.dest: choice.help or "" for choice in subparsers._choices_actions}
        for name, sub in subparsers.choices.items():
            title = f"``{prog} {name}``"
            lines += [title, underline * len(title), ""]
            if helps.get(name) and not sub.description:
                lines += [_text(helps[name][:1].upper() + helps[name][1:]) + ".", ""]
            lines += render(sub, f"{prog} {name}", "~")
    return lines


class ArgparseCli(SphinxDirective):
    """The reference of one command, from the function that builds its parser."""

    required_arguments = 1
    option_spec = {"prog": lambda text: text.strip()}  # noqa: RUF012  (docutils' API)

    def run(self) -> list[nodes.Node]:
        module_name, _, function = self.arguments[0].partition(":")
        module = importlib.import_module(module_name)
        parser: argparse.ArgumentParser = getattr(module, function)()
        prog = self.options.get("prog", parser.prog)
        self.env.note_dependency(module.__file__ or "")
        container = nodes.section()
        container.document = self.state.document
        lines = render(parser, prog, "-")
        nested_parse_with_titles(self.state, StringList(lines, f"<{prog} --help>"), container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("argparse-cli", ArgparseCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
