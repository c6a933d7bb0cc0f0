"""TOML tables into typed attrs classes, with errors that name the file, the route and the key.

:func:`structure` understands the types config classes use: ``str``, ``int``,
``float``, ``bool``, ``Literal[...]``, ``X | None``, unions such as
``str | tuple[str, ...]``, ``list[X]`` and ``tuple[X, ...]`` (from arrays),
``dict[str, X]`` and nested attrs classes. Unknown keys, wrong types and
missing keys are all reported, each as a :class:`Problem`, not just the first.

Two conveniences for secrets, so they need not sit in the file:

- ``${NAME}`` in any string is replaced by the environment variable NAME
  (``$${`` writes a literal ``${``); an unset variable is an error.
- ``${credential:NAME}`` is replaced by the systemd credential NAME: the
  file NAME in ``$CREDENTIALS_DIRECTORY`` (``LoadCredential=NAME:path`` in
  the unit), or else ``bridges_NAME``: the name systemd gives the file NAME
  of a directory loaded as ``LoadCredential=bridges:DIR``, which is how the
  unit template loads ``/etc/bridges/credentials/INSTANCE/``. Read without
  following links and at most :data:`MAX_CREDENTIAL_BYTES`, one trailing
  newline removed. Use it in secret fields (``passcode``, ``secret``,
  ``bearer_token``...), which nothing prints.
- A field marked ``secret`` (``attrs.field(metadata={"secret": True})``) may
  be given as ``NAME_file = "path"`` instead: the file's content, without its
  trailing newline, is the value (a link only with ``[bridge]
  follow_secret_links``).

Both files are read by :func:`bridges._readfile.read_text` (a regular file,
bounded in size and time). Every secret value resolved (a secret field's,
however given; a credential's, wherever used; a URL's password) is kept in
:attr:`Where.secrets`, and becomes the config's ``secrets``: what
:mod:`bridges._redact` masks in everything the process says.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, Union, get_args, get_origin

import attrs

from ._readfile import MAX_SECRET_BYTES, FileMissing, FileRefused, read_text
from ._redact import Redactor, basic_credentials

T = TypeVar("T")

_ENV: Final = re.compile(r"\$\$\{|\$\{([^}]*)\}")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What systemd accepts as a credential name, less anything that could leave the directory.
_CREDENTIAL: Final = re.compile(r"[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,254}")
#: The ID of the credentials directory in the unit template
#: (``LoadCredential=bridges:/etc/bridges/credentials/%i``). systemd loads each file of
#: a directory as the credential ``ID_FILENAME`` (systemd.exec(5), LoadCredential=), so
#: ``${credential:NAME}`` also finds ``bridges_NAME``, whatever the instance is called.
CREDENTIAL_DIRECTORY_ID: Final = "bridges"
#: The longest file name a credential can have (NAME_MAX).
_MAX_CREDENTIAL_NAME: Final = 255
#: The largest credential file read, bytes (as any secret file).
MAX_CREDENTIAL_BYTES: Final = MAX_SECRET_BYTES


@attrs.frozen
class Problem:
    """One thing wrong with a config, and where."""

    file: str | None
    route: str | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        if self.route is not None:
            where += f"route {self.route!r}: "
        return f"{where}{self.key}: {self.message}" if self.key else f"{where}{self.message}"


class ConfigError(Exception):
    """The config cannot be used; ``problems`` says everything that is wrong."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = tuple(problems)


@attrs.define
class Where:
    """The location being converted, and the problems found so far."""

    file: str | None = None
    route: str | None = None
    keys: tuple[str, ...] = ()
    base_dir: Path = attrs.field(factory=Path.cwd)
    problems: list[Problem] = attrs.field(factory=list)
    #: Every secret value resolved so far (shared, like problems): see :func:`note_secret`.
    secrets: list[str] = attrs.field(factory=list, repr=False)
    #: ``*_file`` secrets may be symbolic links (``[bridge] follow_secret_links``).
    follow_links: bool = False

    def at(self, key: str | int) -> Where:
        """The same place, one key deeper; problems and secrets are shared."""
        step = f"[{key}]" if isinstance(key, int) else str(key)
        return Where(
            self.file,
            self.route,
            (*self.keys, step),
            self.base_dir,
            self.problems,
            self.secrets,
            self.follow_links,
        )

    def trial(self) -> Where:
        """The same place with problems of its own (to try a conversion); secrets shared."""
        return Where(
            self.file, self.route, self.keys, self.base_dir, [], self.secrets, self.follow_links
        )

    @property
    def key(self) -> str:
        return ".".join(self.keys).replace(".[", "[")

    def problem(self, message: str) -> None:
        self.problems.append(Problem(self.file, self.route, self.key, message))

    def check(self) -> None:
        """Raise :class:`ConfigError` if any problem was found; a secret resolved so
        far that a problem quotes (an endpoint's error about a value built with
        ``${credential:NAME}``) is masked in it."""
        if self.problems:
            redactor = Redactor()
            redactor.add(self.secrets)
            masked = [attrs.evolve(p, message=redactor.redact(p.message)) for p in self.problems]
            raise ConfigError(masked)


class _Invalid:
    pass


INVALID: Final = _Invalid()


def describe(value: object) -> str:
    """``value`` with its TOML type, for error messages."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        dict: "table",
        list: "array",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({kind})"


def _type_name(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin in (list, tuple, Sequence):
        return f"an array of {_type_name(args[0])}s" if args else "an array"
    if origin in (dict, Mapping):
        return "a table"
    if attrs.has(tp):
        return "a table"
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def expand_env(text: str, where: Where) -> str | _Invalid:
    """Replace ``${NAME}`` with environment variables (``$${`` is a literal ``${``)."""
    if "$" not in text:
        return text
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if name.startswith("credential:"):
            try:
                credential = read_credential(name.removeprefix("credential:"))
            except ValueError as exc:
                missing.append(str(exc))
                return ""
            where.secrets.append(credential)
            return credential
        if not _NAME.fullmatch(name):
            missing.append(f"${{{name}}} is not a valid environment variable reference")
            return ""
        value = os.environ.get(name)
        if value is None:
            missing.append(f"environment variable {name} is not set")
            return ""
        return value

    result = _ENV.sub(replace, text)
    for message in missing:
        where.problem(message)
    return INVALID if missing else result


def read_credential(name: str, directory: str | None = None) -> str:
    """The systemd credential ``name`` from ``$CREDENTIALS_DIRECTORY``, as text.

    The file ``name`` is read, or if there is none ``bridges_name``: systemd
    names the files of a credentials directory ``ID_FILENAME``, and the unit
    template loads its directory with the ID :data:`CREDENTIAL_DIRECTORY_ID`.
    Either is read by :func:`~bridges._readfile.read_text`, relative to the
    directory and without following a link: a regular file of at most
    :data:`MAX_CREDENTIAL_BYTES`, read within
    :data:`~bridges._readfile.READ_TIMEOUT` s, and UTF-8 text; one trailing
    newline is removed.

    Raises:
      ValueError: naming the credential (never its value) and what is wrong.
    """
    where = f"credential {name!r}"
    if not _CREDENTIAL.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"{where}: not a valid credential name")
    directory = directory if directory is not None else os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise ValueError(
            f"{where}: $CREDENTIALS_DIRECTORY is not set (give the unit LoadCredential={name}:...)"
        )
    in_directory = f"{CREDENTIAL_DIRECTORY_ID}_{name}"
    for candidate in (name, in_directory):
        if len(candidate) <= _MAX_CREDENTIAL_NAME:
            try:
                return read_text(
                    candidate, dir_fd=_credentials_directory(directory, where), what=where
                )
            except FileMissing:
                continue
    raise ValueError(
        f"{where}: not in $CREDENTIALS_DIRECTORY (as {name} or {in_directory}: a file {name} "
        f"in the unit's LoadCredential={CREDENTIAL_DIRECTORY_ID}:DIR, or LoadCredential={name}:...)"
    )


def _credentials_directory(directory: str, where: str) -> Callable[[], int]:
    def open_it() -> int:
        try:
            return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise FileRefused(
                f"{where}: cannot open $CREDENTIALS_DIRECTORY: {exc.strerror}"
            ) from None

    return open_it


#: The scalar types a config class may use: whether a TOML value is one.
_SCALARS: Final[dict[Any, Callable[[object], bool]]] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def convert(tp: Any, value: object, where: Where) -> Any:
    """``value`` as type ``tp``; on failure record a problem and return :data:`INVALID`."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object:
        return value
    if attrs.has(tp):
        return structure(tp, value, where)
    if origin in (Union, types.UnionType):
        return _convert_union(tp, args, value, where)
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
    elif tp in _SCALARS:
        if _SCALARS[tp](value):
            if tp is str:
                text = expand_env(value, where)  # type: ignore[arg-type]
                if isinstance(text, str) and "@" in text:
                    _note_url_password(text, where)
                return text
            return float(value) if tp is float else value  # type: ignore[arg-type]
    elif origin in (list, tuple, Sequence, dict, Mapping):
        if _accepts_shape(tp, value):
            return _convert_items(origin, args, value, where)
    else:  # pragma: no cover - a config class uses a type this module does not know
        raise TypeError(f"config type {tp!r} is not supported")
    where.problem(f"expected {_type_name(tp)}, got {describe(value)}")
    return INVALID


def _convert_items(origin: Any, args: tuple[Any, ...], value: Any, where: Where) -> Any:
    """A TOML array or table (its shape already checked) as a list, tuple or dict."""
    if origin in (dict, Mapping):
        value_type = args[1] if len(args) == 2 else Any
        out = {str(k): convert(value_type, v, where.at(str(k))) for k, v in value.items()}
        return INVALID if any(v is INVALID for v in out.values()) else out
    item_type = args[0] if args else Any
    items = [convert(item_type, item, where.at(i)) for i, item in enumerate(value)]
    if any(item is INVALID for item in items):
        return INVALID
    return items if origin is list else tuple(items)


def _convert_union(tp: Any, args: tuple[Any, ...], value: object, where: Where) -> Any:
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:
        return convert(options[0], value, where)
    for option in options:
        trial = where.trial()
        result = convert(option, value, trial)
        if result is not INVALID:
            return result
        if _accepts_shape(option, value):
            where.problems.extend(trial.problems)
            return INVALID
    where.problem(f"expected {_type_name(tp)}, got {describe(value)}")
    return INVALID


def _accepts_shape(tp: Any, value: object) -> bool:
    """True when ``value`` has the shape of ``tp`` (so its inner problems are the ones to show)."""
    origin = get_origin(tp)
    if tp is str:  # a string whose ${VAR} is unset: say that, not "expected a string"
        return isinstance(value, str)
    if origin in (list, tuple, Sequence):
        return isinstance(value, list)
    if origin in (dict, Mapping) or attrs.has(tp):
        return isinstance(value, dict)
    return False


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def structure(cls: type[T], data: object, where: Where) -> T | Any:
    """Build attrs class ``cls`` from the table ``data``.

    Every problem is recorded in ``where``; the result is :data:`INVALID`
    when there was any (call ``where.check()`` to raise them).
    """
    if not isinstance(data, dict):
        where.problem(f"expected a table, got {describe(data)}")
        return INVALID
    fields = {f.alias: f for f in attrs.fields(cls) if f.init}  # type: ignore[arg-type]
    hints = _hints(cls)
    secrets = {f"{name}_file": name for name, f in fields.items() if f.metadata.get("secret")}
    ok = _known_keys(data, set(fields) | set(secrets), where)
    kwargs: dict[str, Any] = {}
    ok = _read_secret_files(data, secrets, kwargs, where) and ok
    for name, field in fields.items():
        if name in kwargs:
            continue
        if name not in data:
            if field.default is attrs.NOTHING:
                where.at(name).problem("missing (required)")
                ok = False
            continue
        converter = _convert_secret if field.metadata.get("secret") else convert
        value = converter(hints[field.name], data[name], where.at(name))
        if value is INVALID or not _validate(field, value, where.at(name)):
            ok = False
        else:
            kwargs[name] = value
    if not ok:
        return INVALID
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        where.problem(str(exc))
        return INVALID


def _known_keys(data: dict[str, object], known: set[str], where: Where) -> bool:
    """Record a problem for every key of ``data`` not in ``known``; True when there is none."""
    ok = True
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            where.at(key).problem(f"unknown key{hint} (known: {', '.join(sorted(known))})")
            ok = False
    return ok


def _read_secret_files(
    data: dict[str, object], secrets: dict[str, str], kwargs: dict[str, Any], where: Where
) -> bool:
    """Read each ``<secret>_file`` key of ``data`` into ``kwargs[<secret>]``; True when all read."""
    ok = True
    for key, secret in secrets.items():
        if key not in data:
            continue
        if secret in data:
            where.at(key).problem(f"give {secret!r} or {key!r}, not both")
            ok = False
            continue
        text = _read_secret(data[key], where.at(key))
        if text is INVALID:
            ok = False
        else:
            where.secrets.append(text)  # type: ignore[arg-type]
            kwargs[secret] = text
    return ok


def _convert_secret(tp: Any, value: object, where: Where) -> Any:
    """:func:`convert` for a secret: a problem names the key and the type, never the value."""
    trial = where.trial()
    result = convert(tp, value, trial)
    if result is INVALID:
        kind = describe(value).rpartition(" ")[2].strip("()")  # the type only
        if isinstance(value, str):  # (a string: only an unset ${VAR} fails, and names it)
            where.problems.extend(trial.problems)
        else:
            where.problem(f"expected {_type_name(tp)}, got a TOML {kind} (a secret: not shown)")
    else:
        where.secrets.extend(result if isinstance(result, list | tuple) else [result])
    return result


def _validate(field: attrs.Attribute[Any], value: object, where: Where) -> bool:
    """Run the field's own validators, so each problem is reported at its key."""
    if field.validator is None:
        return True
    try:
        field.validator(None, field, value)
    except (ValueError, TypeError) as exc:
        message = str(exc).removeprefix(f"'{field.name}' ")
        secret = field.metadata.get("secret")
        where.problem("not valid (a secret: not shown)" if secret else message)
        return False
    return True


def _read_secret(value: object, where: Where) -> str | _Invalid:
    path_text = convert(str, value, where)
    if not isinstance(path_text, str):
        return INVALID
    path = where.base_dir / Path(path_text).expanduser()
    try:
        return read_text(path, follow_links=where.follow_links, what=f"cannot read {str(path)!r}")
    except FileRefused as exc:
        where.problem(str(exc))
        return INVALID


def _note_url_password(text: str, where: Where) -> None:
    """The password of a URL (``scheme://user:password@host``) is a secret wherever it is:
    its decoded and written forms, and ``user:password`` for HTTP Basic auth."""
    try:
        parts = urllib.parse.urlsplit(text)
        password = parts.password
    except ValueError:
        return
    if not password:
        return
    user = urllib.parse.unquote(parts.username or "")
    where.secrets.extend((password, urllib.parse.unquote(password)))
    where.secrets.append(basic_credentials(user, urllib.parse.unquote(password)))
