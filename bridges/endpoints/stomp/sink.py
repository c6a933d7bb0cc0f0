"""The ``stomp`` sink: batches sent to a broker, each confirmed by a receipt or a transaction.

Per batch, either every SEND but the last without a receipt and the last
with one (``confirm = "receipt"``: the broker handles a connection's frames
in order, so its RECEIPT covers the batch), or the batch in a transaction
whose COMMIT carries the receipt (``confirm = "transaction"``; a batch
larger than the embedded broker lets one transaction hold is sent as
several, one after the other). Each SEND carries ``bridge-id: <message id>``
so that the id survives the broker and a ``stomp`` source downstream hands
out the same one.

Each message is checked against what the broker takes before anything of
its batch is sent: a header that is not UTF-8 text (a Redis field that was
not, say) or holds NUL, more headers than ``max_header_count``, a header
line (escaped, in bytes) longer than ``max_header_length``, a frame larger
than ``max_message_bytes``. A message that fails is rejected alone: it goes
to the dead-letter sink with a reason naming the limit, and the rest of its
batch goes through. Without the checks the broker would answer the frame
with an ERROR and close the connection, and the whole batch would be
retried until the route gave up on all of it. A broker does not state these
limits, so they are settings: for ``url = "embedded"`` (or a URL that
reaches it) they default to the embedded broker's :class:`Limits`, else to
the smallest that the brokers tested here enforce (see the constants).

A broker may still refuse a SEND the checks passed (its limits set lower, a
destination it forbids): its ERROR names no frame, so the write raises
:class:`bridges.BatchRefused`, and the engine writes the batch again in
halves until the refused message is alone.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, Literal

import attrs
import trio

import trio_stomp
from trio_stomp.broker import Limits

from ..._endpoint import BatchRefused, Context, InvalidSetting, MessageRejected, prepare_each
from ..._guarantee import NOT_ASKED, PROBE_TIMEOUT, Guarantee, warn_if_weaker
from ..._message import Message
from ..._template import Template, TemplateError
from ._connection import EMBEDDED, ID_HEADER, Connector, StompConnection
from ._probe import judge

log = logging.getLogger("bridges.stomp")

#: The size limit for a broker other than the embedded one: 16 MiB, the
#: embedded broker's frame limit and RabbitMQ 4's default ``max_message_size``
#: (ActiveMQ's STOMP frames may be larger). Raise it with ``max_message_bytes``.
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: The most headers a SEND may carry, for a broker other than the embedded one:
#: ActiveMQ Classic's fixed STOMP limit (``StompWireFormat.MAX_HEADERS``), also
#: the embedded broker's default; RabbitMQ's STOMP plugin takes more.
DEFAULT_MAX_HEADER_COUNT: Final = 1000
#: The longest header line (``name:value`` escaped, in UTF-8 bytes) for a broker
#: other than the embedded one: ActiveMQ Classic's ``MAX_HEADER_LENGTH`` (10 KiB),
#: the smallest of the brokers tested (the embedded one takes 64 KiB, RabbitMQ more).
DEFAULT_MAX_HEADER_LENGTH: Final = 10 * 1024
#: Header lines a SEND carries besides the message's own: destination,
#: content-length, and receipt or transaction.
_SEND_HEADERS: Final = 3
#: What STOMP 1.1 and 1.2 escape in a header (each becomes two bytes).
_ESCAPED: Final = ("\\", ":", "\r", "\n")
#: Bytes of a SEND frame besides the body and the message's own headers
#: (command, destination, content-length, receipt, bridge-id names, separators).
_FRAME_OVERHEAD: Final = 160

#: Headers a SEND must not copy from the message (the client or the broker sets them).
_NOT_SENT: Final = frozenset(
    {
        "destination",
        "receipt",
        "transaction",
        "content-length",
        "subscription",
        "ack",
        "message-id",
        "redelivered",
        ID_HEADER,
    }
)


@attrs.frozen
class StompSinkConfig(StompConnection):
    """Send to a STOMP destination, confirmed per batch by a receipt or a transaction.

    Attributes:
      destination: the destination to send to, a template
        (``/queue/out.{header:region|eu}``); a ``destination`` transform
        overrides it; one of the two is needed.
      confirm: ``"receipt"``: the last SEND of a batch asks for a RECEIPT;
        ``"transaction"``: BEGIN, the SENDs, COMMIT with a receipt.
      persistent: true adds ``persistent:true`` to each SEND, so that RabbitMQ
        and ActiveMQ write the message to disk before the RECEIPT and it
        survives their restart. Default: true for every broker but the
        embedded one (whose durability is its ``data_dir``, and which sends
        nothing for the header). ``false`` makes the route at most once across
        a restart of the broker: ``bridges check`` and the stop say so.
      headers: headers added to every SEND.
      max_message_bytes: a larger message (body and headers) is rejected on
        its own, before anything is sent; default: the embedded broker's frame
        limit for ``url = "embedded"``, else 16 MiB.
      max_header_count: a message with more headers (with ``destination``,
        ``content-length`` and ``receipt``) is rejected; default: the embedded
        broker's limit, else 1000 (ActiveMQ's).
      max_header_length: a message with a longer header line (``name:value``
        escaped, UTF-8 bytes) is rejected; default: the embedded broker's (64
        KiB), else 10 KiB (ActiveMQ's).
    """

    destination: str | None = None
    confirm: Literal["receipt", "transaction"] = "receipt"
    persistent: bool | None = None
    headers: dict[str, str] = attrs.field(factory=dict)
    max_message_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    max_header_count: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    max_header_length: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )


class StompSink:
    """Batches sent to a STOMP broker, each confirmed by a receipt or a committed transaction."""

    def __init__(self, config: StompSinkConfig, context: Context) -> None:
        self._config = config
        self._connector = Connector(config, context)
        self._destination: Template | None = None
        if config.destination is not None:
            try:
                self._destination = Template.parse(config.destination)
            except TemplateError as exc:
                raise InvalidSetting("destination", str(exc)) from None
        for name, value in config.headers.items():
            if name in _NOT_SENT or not name or "\0" in name + value:
                raise InvalidSetting(f"headers.{name}", "this header cannot be set here")
        self._extra = dict(config.headers)
        self._asked = False
        #: Whether the last open reached the process's embedded broker (by its address).
        self._reached_embedded = False
        if "persistent" in config.headers and config.persistent is not None:
            raise InvalidSetting("headers.persistent", "set it with persistent = true/false")

    @classmethod
    def build(cls, config: StompSinkConfig, context: Context) -> StompSink:
        return cls(config, context)

    @property
    def confirm(self) -> str:
        """How a batch is confirmed: "receipt" or "transaction"."""
        return self._config.confirm

    @property
    def max_message_bytes(self) -> int:
        """The largest frame (body and headers) this sink sends, bytes."""
        if self._config.max_message_bytes is not None:
            return self._config.max_message_bytes
        if self._connector.embedded:
            broker = self._connector.broker
            return (broker.limits if broker is not None else Limits()).max_frame_size
        return DEFAULT_MAX_MESSAGE_BYTES

    @property
    def max_header_count(self) -> int:
        """The most headers a SEND carries (the message's own and the sink's)."""
        if self._config.max_header_count is not None:
            return self._config.max_header_count
        if self._connector.embedded:
            return self._limits().max_header_count
        return DEFAULT_MAX_HEADER_COUNT

    @property
    def max_header_length(self) -> int:
        """The longest header line a SEND carries (escaped, UTF-8), bytes."""
        if self._config.max_header_length is not None:
            return self._config.max_header_length
        if self._connector.embedded:
            return self._limits().max_header_length
        return DEFAULT_MAX_HEADER_LENGTH

    def _limits(self) -> Limits:
        broker = self._connector.broker
        return broker.limits if broker is not None else Limits()

    def send_limits(self) -> SendLimits:
        """The limits each message is checked against (a writer looks them up once)."""
        return SendLimits(self.max_message_bytes, self.max_header_count, self.max_header_length)

    @property
    def max_transaction_bytes(self) -> int | None:
        """The most one transaction may hold (the embedded broker's limit), or None: unknown."""
        if self._connector.embedded:
            broker = self._connector.broker
            return (broker.limits if broker is not None else Limits()).max_transaction_bytes
        return None

    @property
    def persistent(self) -> bool:
        """Whether each SEND carries ``persistent:true``: the setting, else true
        unless the sink reaches the embedded broker (known once it runs)."""
        if self._config.persistent is not None:
            return self._config.persistent
        if "persistent" in self._config.headers:
            return self._config.headers["persistent"] == "true"
        return not self._connector.embedded

    def send_headers(self) -> dict[str, str]:
        """The headers this sink adds to every SEND (its ``headers``, ``persistent``)."""
        extra = dict(self._extra)
        if self._config.persistent is not None or not self._connector.embedded:
            extra.setdefault("persistent", "true" if self.persistent else "false")
        return extra

    def weaker_guarantee(self) -> str | None:
        """Why this sink is at most once across a restart of its broker, or None.

        Asks no broker: also right after the process's embedded broker stopped
        (the stop's last line asks it), from what the last open found.
        """
        config = self._config
        if config.persistent is None and config.headers.get("persistent", "true") == "true":
            return None  # (the default: persistent, or the embedded broker, durable by data_dir)
        if config.persistent or config.url == EMBEDDED or self._reached_embedded:
            return None
        return (
            "persistent = false: the broker keeps the messages in memory only, and a "
            "restart of it loses what it receipted"
        )

    def check_warnings(self) -> list[str]:
        """What ``bridges check`` says about this sink: non-persistent, a topic."""
        warnings = []
        if (reason := self.weaker_guarantee()) is not None:
            warnings.append(f"stomp sink with {reason} (AT MOST ONCE across a broker restart)")
        destination = self._config.destination or ""
        if destination.startswith(("/topic/", "/exchange/")):
            warnings.append(
                f"stomp sink to {destination}: a broker receipts a SEND to a topic that no "
                "subscriber reads, and the message is gone (RabbitMQ: nothing bound to it); "
                "send to a /queue/ (or /amq/queue/) for a message to be kept"
            )
        return warnings

    async def probe(self) -> Guarantee:
        """Connect and judge what the broker keeps (``bridges check --probe``)."""
        if self._connector.embedded:
            return Guarantee(NOT_ASKED, "the embedded broker: durable with [broker] data_dir")
        with trio.fail_after(PROBE_TIMEOUT + self._config.connect_timeout):
            async with self._connector.connect() as client:
                server = client.server
        return judge(server, self._constant(), self.weaker_guarantee())

    def _constant(self) -> str | None:
        """The destination when it is the same for every message, else None."""
        if self._destination is None or not self._destination.constant:
            return None
        return self._config.destination

    def describe(self) -> str:
        where = self._config.destination or "the message's destination"
        return f"stomp {where} on {self._connector.where}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[_StompWriter]:
        writer: _StompWriter | None = None
        try:
            self._reached_embedded = self._connector.embedded
            async with self._connector.connect() as client:
                if not self._asked and not self._connector.embedded:
                    self._asked = True  # (once: a retry opens again)
                    guarantee = judge(client.server, self._constant(), self.weaker_guarantee())
                    warn_if_weaker(log, f"stomp {self._connector.where}", guarantee)
                writer = _StompWriter(client, self)
                yield writer
        except trio_stomp.StompError as exc:
            # The client raises the broker's ERROR again as it closes: the refusal stands.
            refused = writer.refused if writer is not None else None
            if refused is None:
                raise
            raise refused from exc

    def prepare(
        self,
        message: Message,
        limits: SendLimits | None = None,
        extra: dict[str, str] | None = None,
    ) -> tuple[str, dict[str, str]]:
        """The destination and SEND headers of ``message``, checked against the limits.

        Args:
          limits: what to check against (default: :meth:`send_limits`).
          extra: the headers added to it (default: :meth:`send_headers`).

        Raises:
          ValueError: no destination, a header STOMP cannot carry (NUL, not
            UTF-8), too many headers, a header line too long, or too big.
        """
        if message.destination:
            destination = message.destination
        elif self._destination is not None:
            destination = self._destination.render(message)
        else:
            raise ValueError("no destination: set the sink's destination or use a transform")
        headers = {}
        for name, value in message.headers.items():
            if name in _NOT_SENT:
                continue
            if not name or "\0" in name or "\0" in value:
                raise ValueError(f"header {name!r} cannot be sent over STOMP (NUL or empty)")
            headers[name] = value
        headers.update(self.send_headers() if extra is None else extra)
        headers[ID_HEADER] = message.id
        if limits is None:
            limits = self.send_limits()
        _check_headers(destination, headers, limits.header_count, limits.header_length)
        _check_size(message.body, destination, headers, limits.message_bytes)
        return destination, headers


@attrs.frozen
class SendLimits:
    """What one SEND may be: see :class:`StompSinkConfig`'s settings of the same names."""

    message_bytes: int
    header_count: int
    header_length: int


def _check_headers(destination: str, headers: dict[str, str], most: int, longest: int) -> None:
    """Raise ValueError if the SEND's headers are not UTF-8 text, too many or too long."""
    if len(headers) + _SEND_HEADERS > most:
        raise ValueError(
            f"{len(headers) + _SEND_HEADERS} headers (with destination, content-length and "
            f"receipt), more than max_header_count = {most}"
        )
    short = longest // 2  # (an ASCII line this short fits even with every byte escaped)
    if len(destination) >= short or not destination.isascii():
        _check_line("destination", destination, longest)
    for name, value in headers.items():
        if len(name) + len(value) >= short or not (name.isascii() and value.isascii()):
            _check_line(name, value, longest)


def _check_line(name: str, value: str, longest: int) -> None:
    try:
        size = len(name.encode()) + len(value.encode()) + 1
    except UnicodeEncodeError as exc:
        where = "name" if exc.object is name else "value"
        raise ValueError(
            f"header {name[:40]!r}: its {where} is not UTF-8 text ({exc.reason} at "
            f"position {exc.start}), which STOMP cannot carry"
        ) from None
    size += sum(text.count(char) for text in (name, value) for char in _ESCAPED)
    if size > longest:
        raise ValueError(
            f"header {name[:40]!r}: a line of {size} bytes, more than max_header_length = {longest}"
        )


def _check_size(body: bytes, destination: str, headers: dict[str, str], limit: int) -> None:
    """Raise ValueError if the SEND frame would be larger than ``limit`` bytes."""
    size = len(body) + _FRAME_OVERHEAD
    chars = len(destination) + sum(len(name) + len(value) + 2 for name, value in headers.items())
    if size + 4 * chars > limit:  # (UTF-8: at most 4 bytes a character; else count exactly)
        size += len(destination.encode())
        for name, value in headers.items():
            size += len(name.encode()) + len(value.encode()) + 2
        if size > limit:
            raise ValueError(
                f"the message is {size} bytes (a body of {len(body)} and its headers), "
                f"more than max_message_bytes = {limit}"
            )


class _StompWriter:
    def __init__(self, client: trio_stomp.Client, sink: StompSink) -> None:
        self._client = client
        self._sink = sink
        self._transaction = sink.confirm == "transaction"
        self._limits = sink.send_limits()
        self._extra = sink.send_headers()
        self._transaction_limit = sink.max_transaction_bytes
        #: Set when the broker refused a write (its ERROR ends the connection).
        self.refused: BatchRefused | None = None
        #: A SEND of this connection asked for a receipt already (see ``_send``).
        self._receipted = False

    async def write(self, batch: Sequence[Message]) -> None:
        frames = prepare_each(batch, self._frame)
        try:
            await self._send(frames)
        except trio_stomp.ServerError as exc:
            # The ERROR names no SEND (none carries a receipt but the last): the
            # engine finds the message by writing the batch again in halves.
            self.refused = BatchRefused(f"the broker refused it: {exc}")
            raise self.refused from exc

    def _frame(self, message: Message) -> _Frame:
        destination, headers = self._sink.prepare(message, self._limits, self._extra)
        return destination, message.body, headers

    async def _send(self, frames: list[_Frame]) -> None:
        client = self._client
        index = 0
        try:
            if self._transaction:
                # A batch larger than the broker lets one transaction hold goes in several,
                # each committed (and durable) before the next; the batch is acked after all.
                for group in _transactions(frames, self._transaction_limit):
                    async with client.transaction(receipt=True) as transaction:
                        for destination, body, headers in group:
                            await transaction.send(destination, body, headers=headers)
                            index += 1
                return
            last = len(frames) - 1
            # The connection's first SEND asks for a receipt too: RabbitMQ turns a
            # connection's publisher confirms on at its first SEND with a receipt, and
            # a RECEIPT waits for the confirm of its own SEND only, so SENDs before that
            # one would be in no confirm (docs/explanation/delivery-guarantees.md).
            first = 0 if not self._receipted else -1
            for index, (destination, body, headers) in enumerate(frames):
                receipt = index in (first, last)
                await client.send(destination, body, headers=headers, receipt=receipt)
                self._receipted = self._receipted or receipt
        except trio_stomp.LocalProtocolError as exc:
            # The client found what the checks did not (nothing of that frame was sent).
            raise MessageRejected.each({index: f"cannot be sent over STOMP: {exc}"}) from None


_Frame = tuple[str, bytes, dict[str, str]]


def _transactions(frames: list[_Frame], limit: int | None) -> list[list[_Frame]]:
    """``frames`` cut into runs whose size (counted as :func:`_check_size` does) fits ``limit``."""
    if limit is None:
        return [frames]
    groups: list[list[_Frame]] = [[]]
    held = 0
    for frame in frames:
        destination, body, headers = frame
        size = len(body) + _FRAME_OVERHEAD + len(destination.encode())
        size += sum(len(n.encode()) + len(v.encode()) + 2 for n, v in headers.items())
        if groups[-1] and held + size > limit:
            groups.append([])
            held = 0
        groups[-1].append(frame)
        held += size
    return groups
