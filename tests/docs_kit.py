"""Reading the docs' commands as a shell would, and checking each.

tests/test_docs_commands.py runs the sweep; this module is how it reads and checks.

A reader on a fresh clone runs ``scripts/quickstart`` or ``scripts/test``,
then ``source .venv/bin/activate`` as README says, and types what the
READMEs and the site's pages (docs/) show. So every command of their shell
blocks (fences marked ``sh``, and lines of unmarked fences that start with a
program; a block marked ``<!-- test: skip: WHY -->`` is listed as not checked,
with its reason), and every command
quoted inline in their prose (``.venv/bin/python bench/...``), is taken
apart as a shell would, and:

- its program exists: in the venv's ``bin`` (``bridges``, ``trio-stomp``,
  ``python``, ``.venv/bin/...``), in the repository (``scripts/``,
  ``bench/``), a shell builtin, or on PATH;
- every repository path it names (``examples/...``, ``bench/...``,
  ``tests/...``) exists;
- a ``bridges`` or ``trio-stomp`` command line parses with the real parser
  (``bridges._cli.build_parser``, ``trio_stomp.cli._main.build_parser``),
  and a ``bench/X.py`` command's flags with that script's own parser;
- the quick and safe ones run: ``bridges check FILE``, ``bridges plugins``,
  ``--help``.

Placeholders in capitals (``CONFIG``, ``N``) stand for a value; ``[...]``
marks optional arguments, which are checked too. A command quoted inline may
name a command without its arguments (``bridges check``). What is not
checked, and why, is :data:`UNCHECKED` (and :data:`ABSOLUTE`: a program
named by its absolute path, such as an install under ``/opt``). A failure
names the README line and what is wrong with it, every problem at once.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from bridges._cli import build_parser as bridges_parser
from trio_stomp.cli._main import build_parser as trio_stomp_parser

ROOT = Path(__file__).resolve().parent.parent


def documents() -> tuple[str, ...]:
    """README.md, bridges/README.md and every page of the site (docs/), from the top folder."""
    pages = (path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md"))
    return ("README.md", "bridges/README.md", *sorted(p for p in pages if "/_" not in p))


DOCUMENTS = documents()
#: The venv's programs: what ``source .venv/bin/activate`` puts first on PATH.
BIN = Path(sys.executable).parent
VENV_PROGRAMS = frozenset({"bridges", "trio-stomp", "python", "python3", "pip", "pytest"})
#: Folders of the repository: a word starting with one of them is a path that must exist.
REPO_DIRS = ("examples/", "bench/", "scripts/", "tests/", "bridges/", "trio_stomp/", ".ci/")
#: The first words that make an inline code span (or a line of an unmarked fence) a command.
PROGRAMS = frozenset({"bridges", "trio-stomp", "python", "python3", "valgrind"})
PROGRAM_FOLDERS = (".venv/bin/", "scripts/")
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
SHELL_BUILTINS = frozenset({"export", "source", ".", "cd", "echo", "set", "unset", "printf"})
#: Words that start a command (``do cmd``); lists whose first word ends a block are no commands.
SHELL_KEYWORDS = frozenset({"do", "then", "else", "elif", "if", "while", "until", "!", "{"})
BLOCK_ENDS = frozenset({"for", "case", "done", "fi", "esac", "}"})
#: Commands that run another command, and how many of their own words come first.
WRAPPERS: dict[str, Callable[[list[str]], int]] = {
    "sudo": lambda _: 1,
    "time": lambda _: 1,
    "valgrind": lambda argv: next(i for i, word in enumerate(argv) if i and word[:1] != "-"),
}
#: Tools the READMEs use that the project's scripts do not install; the command is still checked.
OPTIONAL_TOOLS = {
    "jq": "a JSON filter after `trio-stomp listen --json`, which is checked",
    "valgrind": "the profiler behind one figure; the command it runs is checked",
    "curl": "a standard HTTP client, not on every minimal image",
    "openssl": "a standard tool, not on every minimal image",
    "pipx": "an installer the reader may choose; not installed by the project's scripts",
}
#: Commands not checked at all (by how they start), and why.
UNCHECKED = {
    "sudo ": "changes the system as root (the systemd recipe): not on a test machine",
    "systemctl ": "needs a running systemd as PID 1, which the test machines have not",
    "journalctl ": "needs a running systemd's journal",
}
#: Why a program named by its absolute path is not checked.
ABSOLUTE = "a program of the install the docs describe, outside the repository and the venv"
#: What a placeholder stands for when a command line is parsed.
PLACEHOLDERS = {"CONFIG": "examples/quickstart.toml", "N": "1", "S": "1"}
SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})
REDIRECTS = re.compile(r"^\d*[<>]+&?\d*$")


@attrs.frozen
class Command:
    """One command line of a README, as written (continuation lines joined)."""

    readme: str
    line: int
    text: str
    inline: bool
    #: Why the block it is in is not run (its ``<!-- test: skip: WHY -->`` marker), or "".
    unchecked: str = ""

    def __str__(self) -> str:
        return f"{self.readme}:{self.line}: `{self.text}`"


# -- finding the commands ------------------------------------------------------------


@attrs.frozen
class Block:
    """One fenced block of a page: its language, its text, and the marker just above it.

    A marker is an HTML comment on the line before the fence, ``<!-- test: KIND -->``
    or ``<!-- test: KIND: ARGUMENT -->``, telling the snippet tests how to run the
    block (tests/snippet_kit.py lists the kinds); invisible on the site and the forge.
    """

    page: str
    line: int  # of its first line of content
    language: str
    text: str
    marker: str = ""
    argument: str = ""


MARKER = re.compile(r"^<!-- test: ([\w-]+)(?:: (.*?))? -->$")


def split_page(page: str, text: str) -> tuple[list[Block], list[tuple[int, str]]]:
    """The fenced blocks of a Markdown page, and its other lines (numbered from 1)."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.lstrip().startswith("```"):
            prose.append((index, line))
            continue
        indent = len(line) - len(line.lstrip())
        start = index
        while index < len(lines) and lines[index].strip() != "```":
            index += 1
        body = "\n".join(text_line[indent:] for text_line in lines[start:index])
        marker = MARKER.match(lines[start - 2].strip()) if start >= 2 else None
        kind, argument = marker.groups("") if marker else ("", "")
        blocks.append(Block(page, start + 1, line.strip()[3:].strip(), body, kind, argument))
        index += 1
    return blocks, prose


def readme_commands(readme: str, text: str | None = None) -> Iterator[Command]:
    """The commands of ``readme``'s shell blocks and of its inline code spans, in order."""
    if text is None:
        text = (ROOT / readme).read_text(encoding="utf-8")
    blocks, prose = split_page(readme, text)
    for block in blocks:
        if block.language in SHELL_LANGUAGES or block.language == "":
            yield from _block_commands(block)
    yield from _inline_commands(readme, prose)


def _block_commands(block: Block) -> Iterator[Command]:
    """A shell block's commands (continuation lines joined, here-documents skipped)."""
    lines = block.text.splitlines()
    unchecked = block.argument if block.marker == "skip" else ""
    index = 0
    while index < len(lines):
        number = block.line + index
        text = lines[index].strip().removeprefix("$ ")
        index += 1
        while text.endswith("\\") and index < len(lines):
            text = f"{text[:-1].rstrip()} {lines[index].strip()}"
            index += 1
        if not text or text.startswith("#"):
            continue
        if block.language in SHELL_LANGUAGES or is_command(text):
            yield Command(block.page, number, text, inline=False, unchecked=unchecked)
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)", text)
        while heredoc and index < len(lines) and lines[index].strip() != heredoc.group(1):
            index += 1  # a here-document's lines are its command's input, not commands
        index += 1 if heredoc else 0


def _inline_commands(readme: str, prose: list[tuple[int, str]]) -> Iterator[Command]:
    text = "\n".join(line for _, line in prose)
    for match in re.finditer(r"`([^`]+)`", text):
        span = " ".join(match.group(1).split())
        if is_command(span):
            number = prose[text.count("\n", 0, match.start())][0]
            yield Command(readme, number, span, inline=True)


def is_command(text: str) -> bool:
    """True if ``text`` starts with a program the READMEs run (not a metric or a path)."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if first.startswith(PROGRAM_FOLDERS):
        return not first.endswith("/") and "." not in first.rpartition("/")[2]  # not a folder
    if first.startswith("bench/"):
        return first != text.strip()  # a bench script with flags: `bench/x.py --seed 2`
    return first in PROGRAMS


def strip_comment(text: str) -> str:
    """``text`` without a shell comment: ``#`` at a word's start, outside quotes."""
    quote = ""
    for at, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or text[at - 1].isspace()):
            return text[:at].rstrip()
    return text


def simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a command line: split at pipes and lists, redirects dropped.

    A command substitution, ``$(...)``, is one word of its command, and its
    own commands are among those returned.
    """
    text = strip_comment(text)
    inner: list[list[str]] = []
    while match := re.search(r"\$\(([^()]*)\)", text):
        inner += simple_commands(match.group(1))
        text = f"{text[: match.start()]}SUBSTITUTED{text[match.end() :]}"
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    words = iter(list(lexer))
    for word in words:
        if word in SEPARATORS:
            commands.append([])
        elif REDIRECTS.match(word):
            next(words, None)
        elif commands[-1] or word not in SHELL_KEYWORDS:
            commands[-1].append(word)
    return [_unbracket(argv) for argv in commands if argv and argv[0] not in BLOCK_ENDS] + inner


def _unbracket(argv: list[str]) -> list[str]:
    """``[--users users.txt]`` (optional arguments) as plain words."""
    words, depth = [], 0
    for word in argv:
        while word.startswith("[") and not word.startswith("[["):
            word, depth = word[1:], depth + 1
        while depth and word.endswith("]"):
            word, depth = word[:-1], depth - 1
        if word:
            words.append(word)
    return words


def _unwrap(argv: list[str]) -> list[str]:
    while argv and "=" in argv[0] and not argv[0].startswith(("-", "=")):
        argv = argv[1:]  # VAR=value before the program
    if argv and argv[0] in WRAPPERS:
        return _unwrap(argv[WRAPPERS[argv[0]](argv) :])
    return argv


# -- checking one command ------------------------------------------------------------


def program_problem(program: str) -> str | None:
    """Why ``program`` would not be found after ``source .venv/bin/activate``, or None."""
    if program.startswith(".venv/bin/"):
        name = program.removeprefix(".venv/bin/")
        return None if (BIN / name).exists() else f"{name} is not in the venv ({BIN})"
    if program in VENV_PROGRAMS:
        return None if (BIN / program).exists() else f"{program} is not in the venv ({BIN})"
    if "/" in program:
        path = ROOT / program
        if not path.is_file():
            return f"{program} is not a file of the repository"
        return None if os.access(path, os.X_OK) else f"{program} is not executable"
    if program in SHELL_BUILTINS or program in OPTIONAL_TOOLS or shutil.which(program):
        return None
    return f"{program}: no such program in the venv, the repository or on PATH"


def path_problems(argv: list[str]) -> Iterator[str]:
    """Every repository path among the words that does not exist (globs and {a,b} expanded)."""
    for word in argv[1:]:
        value = word.partition("=")[2] if word.startswith("--") else word
        if value.startswith(REPO_DIRS) and not exists_in_repo(value):
            yield f"{value} does not exist in the repository"


def exists_in_repo(path: str) -> bool:
    return all(glob.glob(str(ROOT / choice)) for choice in _braces(path))


def _braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if match is None:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [p for choice in match.group(1).split(",") for p in _braces(head + choice + tail)]


def parse_problem(parser: argparse.ArgumentParser, args: list[str], inline: bool) -> str | None:
    """What ``parser`` says is wrong with ``args``, or None (``--help`` is fine)."""
    args = [PLACEHOLDERS.get(word, word) for word in args]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as exc:
        message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""
        if exc.code == 0 or (inline and "arguments are required" in message):
            return None  # --help; or a command named in prose without its arguments
        return f"the parser says: {message}"
    return None


def brokers_problem(args: list[str]) -> str | None:
    usage = (ROOT / "scripts" / "brokers").read_text(encoding="utf-8")
    known = set(re.findall(r"^#\s+scripts/brokers (\w+)", usage, re.MULTILINE))
    if args and args[0] not in known:
        return f"scripts/brokers has no command {args[0]!r} (it has {', '.join(sorted(known))})"
    return None


@attrs.define
class Checked:
    """What checking the READMEs found, and what is left to run."""

    problems: list[str] = attrs.Factory(list)
    bench: list[tuple[Command, str, list[str]]] = attrs.Factory(list)
    runs: list[tuple[Command, list[str]]] = attrs.Factory(list)
    skipped: list[tuple[Command, str]] = attrs.Factory(list)

    def check(self, command: Command) -> None:
        if command.unchecked:
            self.skipped.append((command, command.unchecked))
            return
        for start, reason in UNCHECKED.items():
            if command.text.startswith(start):
                self.skipped.append((command, reason))
                return
        try:
            commands = simple_commands(command.text)
        except ValueError as exc:
            self.problems.append(f"{command}: not a shell command line ({exc})")
            return
        for argv in map(_unwrap, commands):
            for problem in self._check_one(command, argv):
                self.problems.append(f"{command}: {problem}")

    def _check_one(self, command: Command, argv: list[str]) -> Iterator[str]:
        if not argv:
            return
        if argv[0].startswith("/"):
            self.skipped.append((command, f"{argv[0]}: {ABSOLUTE}"))
            return
        if argv[0].startswith("bench/"):
            argv = ["python", *argv]  # `bench/x.py --seed 2` in prose: how it is run
        problem = program_problem(argv[0])
        if problem:
            yield problem
            return
        yield from path_problems(argv)
        problem = self._arguments_problem(command, argv)
        if problem:
            yield problem

    def _arguments_problem(self, command: Command, argv: list[str]) -> str | None:
        """What the program says of its arguments; what to run or parse later is noted."""
        program, args = argv[0], argv[1:]
        name = program.removeprefix(".venv/bin/")
        parser = {"bridges": bridges_parser, "trio-stomp": trio_stomp_parser}.get(name)
        if parser is not None:
            problem = parse_problem(parser(), args, command.inline)
            if problem is None and _runnable(name, args):
                self.runs.append((command, argv))
            return problem
        if name in ("python", "python3") and args[:1] == ["-m"] and len(args) > 1:
            found = importlib.util.find_spec(args[1].split(".")[0])
            return None if found else f"no module {args[1]} to run"
        if name in ("python", "python3") and args and args[0].startswith("bench/"):
            if (ROOT / args[0]).is_file():
                self.bench.append((command, args[0], args[1:]))
        elif program == "scripts/brokers":
            return brokers_problem(args)
        elif program in ("source", ".") and args and program_problem(args[0]):
            return f"{args[0]} is not in the venv ({BIN})"
        return None


def _runnable(name: str, args: list[str]) -> bool:
    """Quick, safe, and touching nothing: ``--help``, ``bridges plugins``, ``bridges check``."""
    if any("$" in word for word in args):
        return False  # a shell variable's value is the reader's
    if any(word in ("-h", "--help", "--version") for word in args):
        return True
    if name != "bridges" or not args:
        return False
    if args[0] == "check" and len(args) == 2:
        return args[1] in PLACEHOLDERS or (ROOT / args[1]).exists()  # else a file the page writes
    return args[0] == "plugins"


#: Runs in a fresh interpreter: parses each (script, flags) with the script's own parser,
#: stopping the script right there. A script whose source (or its bench module's) never
#: calls parse_args is not run at all: it would run the benchmark.
BENCH_RUNNER = r"""
import argparse, contextlib, io, json, os, runpy, sys

class Parsed(Exception):
    pass

original = argparse.ArgumentParser.parse_args

def parse_args(self, args=None, namespace=None):
    original(self, args, namespace)
    raise Parsed

argparse.ArgumentParser.parse_args = parse_args
results = []
for script, flags in json.load(sys.stdin):
    sys.argv = [script, *flags]
    sys.path.insert(0, os.path.dirname(script))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(script, run_name="__main__")
        results.append("ran to its end without parsing its arguments")
    except Parsed:
        results.append(None)
    except SystemExit as exc:
        lines = err.getvalue().strip().splitlines()
        results.append(None if exc.code == 0 else f"the parser says: {lines[-1] if lines else exc}")
    except BaseException as exc:
        results.append(f"failed before parsing its arguments: {exc!r}")
    finally:
        sys.path.pop(0)
print(json.dumps(results))
"""


def parses_arguments(script: Path) -> bool:
    """True if the script, or a bench module it imports, calls ``parse_args``."""
    source = script.read_text(encoding="utf-8")
    modules = re.findall(r"^from (_\w+) import", source, re.MULTILINE)
    imported = (script.parent / f"{module}.py" for module in modules)
    sources = [source, *(path.read_text(encoding="utf-8") for path in imported if path.exists())]
    return any("parse_args(" in text for text in sources)


def bench_problems(bench: list[tuple[Command, str, list[str]]]) -> Iterator[str]:
    """The bench commands whose flags their script's parser refuses."""
    jobs = []
    for command, script, flags in bench:
        if parses_arguments(ROOT / script):
            jobs.append((command, script, [PLACEHOLDERS.get(flag, flag) for flag in flags]))
        elif flags:
            yield f"{command}: {script} parses no arguments, so {' '.join(flags)} mean nothing"
    if not jobs:
        return
    done = subprocess.run(
        [sys.executable, "-c", BENCH_RUNNER],
        input=json.dumps([(str(ROOT / script), flags) for _, script, flags in jobs]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    for (command, script, _), result in zip(jobs, json.loads(done.stdout), strict=True):
        if result is not None:
            yield f"{command}: {script}: {result}"


def run_problem(argv: list[str]) -> str | None:
    """Run a quick, safe command as written, from the repository's top, on the venv's PATH."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    program = str(BIN / argv[0].removeprefix(".venv/bin/"))
    argv = [program, *(PLACEHOLDERS.get(word, word) for word in argv[1:])]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
        return f"exits {done.returncode}: {' '.join(last)}"
    return None


def prose(readme: str) -> str:
    """``readme`` without its fenced blocks."""
    _, lines = split_page(readme, (ROOT / readme).read_text(encoding="utf-8"))
    return "\n".join(line for _, line in lines)


def named_paths(readme: str) -> Iterator[str]:
    """The repository paths ``readme`` names: in its code spans (``tests/...``,
    ``bench/...``), as the files its ``{literalinclude}`` blocks show, and as the first
    word of a line of its plain text blocks (a layout: ``trio_stomp/frame/  the codec``)."""
    folders = "|".join(re.escape(folder) for folder in REPO_DIRS)
    for span in re.findall(r"`([^`]+)`", prose(readme)):
        for word in re.findall(rf"(?<![\w./-])(?:{folders})[\w./@{{}},*-]*", span):
            module, _, _ = word.rpartition(".")  # bench/_base.write_report: a module's name
            yield f"{module}.py" if (ROOT / f"{module}.py").is_file() else word
    blocks, _ = split_page(readme, (ROOT / readme).read_text(encoding="utf-8"))
    for block in blocks:
        if block.language.startswith("{literalinclude}"):
            target = block.language.removeprefix("{literalinclude}").strip()
            yield ((ROOT / readme).parent / target).resolve().relative_to(ROOT).as_posix()
        elif block.language in ("", "text"):
            lines = [line for line in block.text.splitlines() if line[:1].strip()]
            words = (line.split()[0].rstrip(",") for line in lines)
            yield from (word for word in words if word.startswith(REPO_DIRS))


def link_problems(readme: str) -> Iterator[str]:
    """Links to files of the repository that are not there, or to headings that are not."""
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(readme)):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, heading = target.partition("#")
        file = ((ROOT / readme).parent / path).resolve() if path else ROOT / readme
        plotted = PLOT.search(path)
        if plotted and file.parent.parent == ROOT / "docs" / "performance":
            file = file.parent.parent / "data" / f"{plotted[1]}.json"  # scripts/plots draws it
            if not file.exists():
                yield f"{readme}: the plot ({target}) has no data to draw: {file.relative_to(ROOT)}"
        elif not file.exists():
            yield f"{readme}: the link ({target}) leads to no file"
        elif heading and heading not in _anchors(file):
            yield f"{readme}: the link ({target}) leads to no heading of {path or readme}"


#: A plot of the performance pages: made by scripts/plots from data/NAME.json, not in git.
PLOT = re.compile(r"(?:^|/)plots/([\w-]+)\.png$")


def _anchors(markdown: Path) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+ (.+)$", markdown.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w -]", "", h.strip().lower()).replace(" ", "-") for h in headings}
