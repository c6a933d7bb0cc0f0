"""Every example frame of the seed specs in /work/shared/specs/, by hand.

Each example names its spec file, section and lines. ``spec(...)`` takes the
example line by line as printed (indentation removed) and turns ``^@`` into
the NUL that ends a frame, so an entry reads like the spec.

Where a document lost its layout, the reconstruction is stated:

- stomp-fuse-activemq-1.0.txt prints every frame flattened onto one line.
  Line breaks are restored where the original 1.0 spec has them (command,
  each header, blank line, body); a space right before ``^@`` stands for the
  line break there, as in the original.
- stomp-1.2-zh.txt lost every blank line. They are restored as in the 1.1
  draft and the Korean translation: a blank line between headers and body,
  none in DISCONNECT and RECEIPT receipt-id:77 (whose NUL follows the
  headers directly in both). The ERROR example keeps its content-length:171,
  which fixes its body: the two blank lines of the 1.1 draft's copy.
- stomp-1.1-draft.md pads three blank lines with spaces (markdown layout);
  they are taken as blank here, and the verbatim bytes get their own test
  (``CONNECT_1_1_PADDED_BLANK_LINE``).

Schematics (``command``/``COMMAND`` frames, the heart-beat sketches) and the
misspelt ``UNSUBSRIBE`` are not frames: they are in ``NOT_FRAMES`` with the
error they must give. The one example without its ``^@`` is in ``PARTIAL``.
"""

from __future__ import annotations

import attrs

from trio_stomp.frame import Frame


def spec(*lines: str) -> bytes:
    """An example as the spec prints it, one argument per line; ``^@`` is NUL."""
    return "\n".join(lines).replace("^@", "\0").encode()


@attrs.frozen
class Example:
    """One example: where it is, its bytes, the frames they are, which versions."""

    source: str
    wire: bytes
    frames: tuple[Frame, ...]
    versions: tuple[str, ...]

    def __str__(self) -> str:  # the pytest id
        return self.source


def _examples(versions: tuple[str, ...], *items: tuple[str, bytes, Frame]) -> list[Example]:
    return [Example(source, wire, (frame,), versions) for source, wire, frame in items]


HELLO_BODY = b"hello, world!"

# -- STOMP 1.0 (stomp-1.0-protocol.txt): values lose their leading spaces ------

P10 = "stomp-1.0-protocol.txt"
SPEC_1_0 = _examples(
    ("1.0",),
    (
        f"{P10} Frames, with a content length (l.51-56)",
        spec(
            "MESSAGE",
            "destination: /queue/a",
            "message-id: 1234",
            "content-length: 13",
            "",
            "hello, world!^@",
        ),
        Frame(
            "MESSAGE",
            [("destination", "/queue/a"), ("message-id", "1234"), ("content-length", "13")],
            HELLO_BODY,
        ),
    ),
    (
        f"{P10} Frames, without a content length (l.60-64)",
        spec("MESSAGE", "destination: /queue/a", "message-id: 1234", "", "hello, world!^@"),
        Frame("MESSAGE", [("destination", "/queue/a"), ("message-id", "1234")], HELLO_BODY),
    ),
    (
        f"{P10} Command Overview, CONNECT (l.83-87)",
        spec("CONNECT", "username: fred", "passcode: xyzzy", "", "^@"),
        Frame("CONNECT", [("username", "fred"), ("passcode", "xyzzy")]),
    ),
    (
        f"{P10} Receipts, SEND with receipt (l.134-139)",
        spec(
            "SEND",
            "destination: /queue/a",
            "receipt: foo9876",
            "content-length: 13",
            "",
            "hello, world!^@",
        ),
        Frame(
            "SEND",
            [("destination", "/queue/a"), ("receipt", "foo9876"), ("content-length", "13")],
            HELLO_BODY,
        ),
    ),
    (
        f"{P10} Receipts, RECEIPT (l.143-146)",
        spec("RECEIPT", "receipt-id: foo9876", "", "^@"),
        Frame("RECEIPT", [("receipt-id", "foo9876")]),
    ),
    (
        f"{P10} Sending messages to destinations, SEND (l.163-167)",
        spec("SEND", "destination: /queue/a", "content-length: 13", "", "hello, world!^@"),
        Frame("SEND", [("destination", "/queue/a"), ("content-length", "13")], HELLO_BODY),
    ),
)

# -- STOMP 1.0 as ActiveMQ/Fuse serves it (stomp-fuse-activemq-1.0.txt) --------

AMQ = "stomp-fuse-activemq-1.0.txt"
TX = "<transaction-identifier>"
SPEC_ACTIVEMQ_1_0 = _examples(
    ("1.0",),
    (
        f"{AMQ} receipt header, SEND (l.28)",
        spec("SEND", "destination:/queue/a", "receipt:message-12345", "", "Hello a!^@"),
        Frame("SEND", [("destination", "/queue/a"), ("receipt", "message-12345")], b"Hello a!"),
    ),
    (
        f"{AMQ} CONNECT (l.47)",
        spec("CONNECT", "login: <username>", "passcode:<passcode>", "", "^@"),
        Frame("CONNECT", [("login", "<username>"), ("passcode", "<passcode>")]),
    ),
    (
        f"{AMQ} CONNECTED (l.50)",
        spec("CONNECTED", "session: <session-id>", "", "^@"),
        Frame("CONNECTED", [("session", "<session-id>")]),
    ),
    (
        f"{AMQ} SEND (l.58)",
        spec("SEND", "destination:/queue/a", "", "hello queue a", "^@"),
        Frame("SEND", [("destination", "/queue/a")], b"hello queue a\n"),
    ),
    (
        f"{AMQ} SUBSCRIBE (l.72)",
        spec("SUBSCRIBE", "destination: /queue/foo", "ack: client", "", "^@"),
        Frame("SUBSCRIBE", [("destination", "/queue/foo"), ("ack", "client")]),
    ),
    (
        f"{AMQ} UNSUBSCRIBE (l.86)",
        spec("UNSUBSCRIBE", "destination: /queue/a", "", "^@"),
        Frame("UNSUBSCRIBE", [("destination", "/queue/a")]),
    ),
    (
        f"{AMQ} ACK (l.97)",
        spec("ACK", "message-id: <message-identifier>", f"transaction: {TX}", "", "^@"),
        Frame("ACK", [("message-id", "<message-identifier>"), ("transaction", TX)]),
    ),
    (
        f"{AMQ} BEGIN (l.102)",
        spec("BEGIN", f"transaction: {TX}", "", "^@"),
        Frame("BEGIN", [("transaction", TX)]),
    ),
    (
        f"{AMQ} COMMIT (l.108)",
        spec("COMMIT", f"transaction: {TX}", "", "^@"),
        Frame("COMMIT", [("transaction", TX)]),
    ),
    (
        f"{AMQ} ABORT (l.112)",
        spec("ABORT", f"transaction: {TX}", "", "^@"),
        Frame("ABORT", [("transaction", TX)]),
    ),
    (
        f"{AMQ} MESSAGE (l.130)",
        spec(
            "MESSAGE",
            "destination:/queue/a",
            "message-id: <message-identifier>",
            "",
            "hello queue a^@",
        ),
        Frame(
            "MESSAGE",
            [("destination", "/queue/a"), ("message-id", "<message-identifier>")],
            b"hello queue a",
        ),
    ),
    (
        f"{AMQ} RECEIPT (l.138)",
        spec("RECEIPT", "receipt-id:message-12345", "", "^@"),
        Frame("RECEIPT", [("receipt-id", "message-12345")]),
    ),
    (
        f"{AMQ} ERROR (l.144)",
        spec(
            "ERROR",
            "message: malformed packet received",
            "",
            "The message:",
            "-----",
            "MESSAGE",
            "destined:/queue/a",
            "",
            "Hello queue a!",
            "-----",
            "Did not contain a destination header, which is required for message propagation.",
            "^@",
        ),
        Frame(
            "ERROR",
            [("message", "malformed packet received")],
            b"The message:\n-----\nMESSAGE\ndestined:/queue/a\n\nHello queue a!\n-----\n"
            b"Did not contain a destination header, which is required for message propagation.\n",
        ),
    ),
)

# -- STOMP 1.1 (stomp-1.1-draft.md); they parse the same under 1.2 --------------

D11 = "stomp-1.1-draft.md"
HOST = ("host", "stomp.github.org")
ERROR_BODY_1_1 = (
    b"The message:\n-----\nMESSAGE\ndestined:/queue/a\nreceipt:message-12345\n\n\n"
    b"Hello queue a!\n-----\nDid not contain a destination header, which is required \n"
    b"for message propagation.\n"
)
SPEC_1_1 = _examples(
    ("1.1", "1.2"),
    (
        f"{D11} Repeated Header Entries (l.82-86)",
        spec("MESSAGE", "foo:World", "foo:Hello", "", "^@"),
        Frame("MESSAGE", [("foo", "World"), ("foo", "Hello")]),
    ),
    (
        # l.98 is a line of spaces (markdown padding), taken as the blank line.
        f"{D11} Connecting, CONNECT (l.95-99)",
        spec("CONNECT", "accept-version:1.1", "host:stomp.github.org", "", "^@"),
        Frame("CONNECT", [("accept-version", "1.1"), HOST]),
    ),
    (
        f"{D11} Connecting, CONNECTED (l.104-107)",
        spec("CONNECTED", "version:1.1", "", "^@"),
        Frame("CONNECTED", [("version", "1.1")]),
    ),
    (
        # l.170 is padded with spaces like l.98.
        f"{D11} Protocol Negotiation, CONNECT (l.167-171)",
        spec("CONNECT", "accept-version:1.0,1.1,2.0", "host:stomp.github.org", "", "^@"),
        Frame("CONNECT", [("accept-version", "1.0,1.1,2.0"), HOST]),
    ),
    (
        f"{D11} Protocol Negotiation, CONNECTED (l.176-179)",
        spec("CONNECTED", "version:1.1", "", "^@"),
        Frame("CONNECTED", [("version", "1.1")]),
    ),
    (
        # l.187 is padded with spaces like l.98.
        f"{D11} Protocol Negotiation, ERROR (l.184-188)",
        spec(
            "ERROR",
            "version:1.2,2.1",
            "content-type:text/plain",
            "",
            "Supported protocol versions are 1.2 2.1^@",
        ),
        Frame(
            "ERROR",
            [("version", "1.2,2.1"), ("content-type", "text/plain")],
            b"Supported protocol versions are 1.2 2.1",
        ),
    ),
    (
        f"{D11} SEND (l.212-217)",
        spec("SEND", "destination:/queue/a", "content-type:text/plain", "", "hello queue a", "^@"),
        Frame(
            "SEND",
            [("destination", "/queue/a"), ("content-type", "text/plain")],
            b"hello queue a\n",
        ),
    ),
    (
        f"{D11} SUBSCRIBE (l.259-264)",
        spec("SUBSCRIBE", "id:0", "destination:/queue/foo", "ack:client", "", "^@"),
        Frame("SUBSCRIBE", [("id", "0"), ("destination", "/queue/foo"), ("ack", "client")]),
    ),
    (
        f"{D11} UNSUBSCRIBE (l.312-315)",
        spec("UNSUBSCRIBE", "id:0", "", "^@"),
        Frame("UNSUBSCRIBE", [("id", "0")]),
    ),
    (
        f"{D11} ACK (l.330-335)",
        spec("ACK", "subscription:0", "message-id:007", "transaction:tx1", "", "^@"),
        Frame("ACK", [("subscription", "0"), ("message-id", "007"), ("transaction", "tx1")]),
    ),
    (
        f"{D11} BEGIN (l.357-360)",
        spec("BEGIN", "transaction:tx1", "", "^@"),
        Frame("BEGIN", [("transaction", "tx1")]),
    ),
    (
        f"{D11} COMMIT (l.374-377)",
        spec("COMMIT", "transaction:tx1", "", "^@"),
        Frame("COMMIT", [("transaction", "tx1")]),
    ),
    (
        f"{D11} ABORT (l.386-389)",
        spec("ABORT", "transaction:tx1", "", "^@"),
        Frame("ABORT", [("transaction", "tx1")]),
    ),
    (
        # No blank line: the NUL follows the headers (accepted, see FrameParser).
        f"{D11} DISCONNECT (l.404-406)",
        spec("DISCONNECT", "receipt:77", "^@"),
        Frame("DISCONNECT", [("receipt", "77")]),
    ),
    (
        f"{D11} DISCONNECT, its RECEIPT (l.410-412)",
        spec("RECEIPT", "receipt-id:77", "^@"),
        Frame("RECEIPT", [("receipt-id", "77")]),
    ),
    (
        f"{D11} Header receipt, SEND (l.456-460)",
        spec("SEND", "destination:/queue/a", "receipt:message-12345", "", "hello queue a^@"),
        Frame(
            "SEND", [("destination", "/queue/a"), ("receipt", "message-12345")], b"hello queue a"
        ),
    ),
    (
        f"{D11} MESSAGE (l.480-486)",
        spec(
            "MESSAGE",
            "subscription:0",
            "message-id:007",
            "destination:/queue/a",
            "content-type:text/plain",
            "",
            "hello queue a^@",
        ),
        Frame(
            "MESSAGE",
            [
                ("subscription", "0"),
                ("message-id", "007"),
                ("destination", "/queue/a"),
                ("content-type", "text/plain"),
            ],
            b"hello queue a",
        ),
    ),
    (
        f"{D11} RECEIPT (l.504-507)",
        spec("RECEIPT", "receipt-id:message-12345", "", "^@"),
        Frame("RECEIPT", [("receipt-id", "message-12345")]),
    ),
    (
        # 1.1 never trims: the message value keeps its leading space.
        f"{D11} ERROR (l.518-534)",
        spec(
            "ERROR",
            "receipt-id:message-12345",
            "content-type:text/plain",
            "message: malformed frame received",
            "",
            "The message:",
            "-----",
            "MESSAGE",
            "destined:/queue/a",
            "receipt:message-12345",
            "",
            "",
            "Hello queue a!",
            "-----",
            "Did not contain a destination header, which is required ",
            "for message propagation.",
            "^@",
        ),
        Frame(
            "ERROR",
            [
                ("receipt-id", "message-12345"),
                ("content-type", "text/plain"),
                ("message", " malformed frame received"),
            ],
            ERROR_BODY_1_1,
        ),
    ),
)

#: stomp-1.1-draft.md l.95-99 byte for byte: its blank line holds 10 spaces.
CONNECT_1_1_PADDED_BLANK_LINE = spec(
    "CONNECT", "accept-version:1.1", "host:stomp.github.org", " " * 10, "^@"
)

# -- STOMP 1.2 (stomp-1.2-zh.txt, stomp-1.2-ko.txt); they parse the same in 1.1 --

ZH = "stomp-1.2-zh.txt"
KO = "stomp-1.2-ko.txt"
SEND_TEXT = Frame(
    "SEND", [("destination", "/queue/a"), ("content-type", "text/plain")], b"hello queue a\n"
)
SEND_RECEIPT = Frame(
    "SEND", [("destination", "/queue/a"), ("receipt", "message-12345")], b"hello queue a"
)
MESSAGE_1_2 = Frame(
    "MESSAGE",
    [
        ("subscription", "0"),
        ("message-id", "007"),
        ("destination", "/queue/a"),
        ("content-type", "text/plain"),
    ],
    b"hello queue a",
)
MESSAGE_1_2_LINES = (
    "MESSAGE",
    "subscription:0",
    "message-id:007",
    "destination:/queue/a",
    "content-type:text/plain",
    "",
    "hello queue a^@",
)
SUBSCRIBE_1_2 = Frame("SUBSCRIBE", [("id", "0"), ("destination", "/queue/foo"), ("ack", "client")])
ERROR_BODY_1_2 = ERROR_BODY_1_1.replace(b"required \n", b"REQUIRED\n")
assert len(ERROR_BODY_1_2) == 171
SPEC_1_2 = _examples(
    ("1.2", "1.1"),
    (
        f"{ZH} 3.2.3 Header receipt, SEND (l.65-68)",
        spec("SEND", "destination:/queue/a", "receipt:message-12345", "", "hello queue a^@"),
        SEND_RECEIPT,
    ),
    (
        f"{ZH} 4 Connecting, CONNECT (l.86-89)",
        spec("CONNECT", "accept-version:1.2", "host:stomp.github.org", "", "^@"),
        Frame("CONNECT", [("accept-version", "1.2"), HOST]),
    ),
    (
        f"{ZH} 4 Connecting, CONNECTED (l.91-93)",
        spec("CONNECTED", "version:1.2", "", "^@"),
        Frame("CONNECTED", [("version", "1.2")]),
    ),
    (
        f"{ZH} 4.3 Protocol Negotiation, CONNECT (l.133-136)",
        spec("CONNECT", "accept-version:1.0,1.1,2.0", "host:stomp.github.org", "", "^@"),
        Frame("CONNECT", [("accept-version", "1.0,1.1,2.0"), HOST]),
    ),
    (
        f"{ZH} 4.3 Protocol Negotiation, CONNECTED (l.138-140)",
        spec("CONNECTED", "version:1.1", "", "^@"),
        Frame("CONNECTED", [("version", "1.1")]),
    ),
    (
        f"{ZH} 4.3 Protocol Negotiation, ERROR (l.143-146)",
        spec(
            "ERROR",
            "version:1.2,2.1",
            "content-type:text/plain",
            "",
            "Supported protocol versions are 1.2 2.1^@",
        ),
        Frame(
            "ERROR",
            [("version", "1.2,2.1"), ("content-type", "text/plain")],
            b"Supported protocol versions are 1.2 2.1",
        ),
    ),
    (
        f"{ZH} 5.1 SEND (l.186-190)",
        spec("SEND", "destination:/queue/a", "content-type:text/plain", "", "hello queue a", "^@"),
        SEND_TEXT,
    ),
    (
        f"{ZH} 5.2 SUBSCRIBE (l.211-215)",
        spec("SUBSCRIBE", "id:0", "destination:/queue/foo", "ack:client", "", "^@"),
        SUBSCRIBE_1_2,
    ),
    (
        f"{ZH} 5.3 UNSUBSCRIBE (l.245-247)",
        spec("UNSUBSCRIBE", "id:0", "", "^@"),
        Frame("UNSUBSCRIBE", [("id", "0")]),
    ),
    (
        f"{ZH} 5.4 ACK (l.254-257)",
        spec("ACK", "id:12345", "transaction:tx1", "", "^@"),
        Frame("ACK", [("id", "12345"), ("transaction", "tx1")]),
    ),
    (
        f"{ZH} 5.6 BEGIN (l.272-274)",
        spec("BEGIN", "transaction:tx1", "", "^@"),
        Frame("BEGIN", [("transaction", "tx1")]),
    ),
    (
        f"{ZH} 5.7 COMMIT (l.284-286)",
        spec("COMMIT", "transaction:tx1", "", "^@"),
        Frame("COMMIT", [("transaction", "tx1")]),
    ),
    (
        f"{ZH} 5.8 ABORT (l.290-292)",
        spec("ABORT", "transaction:tx1", "", "^@"),
        Frame("ABORT", [("transaction", "tx1")]),
    ),
    (
        f"{ZH} 5.9 DISCONNECT (l.301-303)",
        spec("DISCONNECT", "receipt:77", "^@"),
        Frame("DISCONNECT", [("receipt", "77")]),
    ),
    (
        f"{ZH} 5.9 DISCONNECT, its RECEIPT (l.308-310)",
        spec("RECEIPT", "receipt-id:77", "^@"),
        Frame("RECEIPT", [("receipt-id", "77")]),
    ),
    (f"{ZH} 6.1 MESSAGE (l.332-337)", spec(*MESSAGE_1_2_LINES), MESSAGE_1_2),
    (
        f"{ZH} 6.2 RECEIPT (l.348-350)",
        spec("RECEIPT", "receipt-id:message-12345", "", "^@"),
        Frame("RECEIPT", [("receipt-id", "message-12345")]),
    ),
    (
        # The body has 171 bytes, as its content-length says.
        f"{ZH} 6.3 ERROR (l.357-371)",
        spec(
            "ERROR",
            "receipt-id:message-12345",
            "content-type:text/plain",
            "content-length:171",
            "message: malformed frame received",
            "",
            "The message:",
            "-----",
            "MESSAGE",
            "destined:/queue/a",
            "receipt:message-12345",
            "",
            "",
            "Hello queue a!",
            "-----",
            "Did not contain a destination header, which is REQUIRED",
            "for message propagation.",
            "^@",
        ),
        Frame(
            "ERROR",
            [
                ("receipt-id", "message-12345"),
                ("content-type", "text/plain"),
                ("content-length", "171"),
                ("message", " malformed frame received"),
            ],
            ERROR_BODY_1_2,
        ),
    ),
    (
        f"{KO} receipt, SEND (l.87-91)",
        spec("SEND", "destination:/queue/a", "receipt:message-12345", "", "hello queue a^@"),
        SEND_RECEIPT,
    ),
    (
        # "food" (sic): the translation's typo is kept, the example still parses.
        f"{KO} repeated header entries, MESSAGE (l.102-106)",
        spec("MESSAGE", "foo:World", "food:Hello", "", "^@"),
        Frame("MESSAGE", [("foo", "World"), ("food", "Hello")]),
    ),
    (
        # "accecpt-version" (sic).
        f"{KO} connecting, CONNECT (l.130-134)",
        spec("CONNECT", "accecpt-version:1.0,1.1,1.2", "host:stomp.github.org", "", "^@"),
        Frame("CONNECT", [("accecpt-version", "1.0,1.1,1.2"), HOST]),
    ),
    (
        # Header names are case-sensitive: this is not a "version" header.
        f"{KO} connecting, CONNECTED (l.138-141)",
        spec("CONNECTED", "VERSION:1.1", "", "^@"),
        Frame("CONNECTED", [("VERSION", "1.1")]),
    ),
    (
        f"{KO} client frames, SEND (l.181-186)",
        spec("SEND", "destination:/queue/a", "content-type:text/plain", "", "hello queue a", "^@"),
        SEND_TEXT,
    ),
    (
        f"{KO} client frames, SUBSCRIBE (l.189-194)",
        spec("SUBSCRIBE", "id:0", "destination:/queue/foo", "ack:client", "", "^@"),
        SUBSCRIBE_1_2,
    ),
    (
        f"{KO} client frames, BEGIN (l.200-203)",
        spec("BEGIN", "transaction:tx1", "", "^@"),
        Frame("BEGIN", [("transaction", "tx1")]),
    ),
    (
        f"{KO} client frames, COMMIT (l.206-209)",
        spec("COMMIT", "transaction:tx1", "", "^@"),
        Frame("COMMIT", [("transaction", "tx1")]),
    ),
    (
        f"{KO} client frames, ABORT (l.212-215)",
        spec("ABORT", "transaction:tx1", "", "^@"),
        Frame("ABORT", [("transaction", "tx1")]),
    ),
    (
        # "transation" (sic).
        f"{KO} client frames, ACK (l.218-222)",
        spec("ACK", "id:12345", "transation:tx1", "", "^@"),
        Frame("ACK", [("id", "12345"), ("transation", "tx1")]),
    ),
    (
        f"{KO} client frames, DISCONNECT (l.227-229)",
        spec("DISCONNECT", "receipt:77", "^@"),
        Frame("DISCONNECT", [("receipt", "77")]),
    ),
    (
        # Flattened ("RECEIPT receipt-id:77 ^@"): like the DISCONNECT above it.
        f"{KO} client frames, RECEIPT (l.231)",
        spec("RECEIPT", "receipt-id:77", "^@"),
        Frame("RECEIPT", [("receipt-id", "77")]),
    ),
    (f"{KO} server frames, MESSAGE (l.237-243)", spec(*MESSAGE_1_2_LINES), MESSAGE_1_2),
)

EXAMPLES: list[Example] = SPEC_1_0 + SPEC_ACTIVEMQ_1_0 + SPEC_1_1 + SPEC_1_2

#: Text in the specs shaped like a frame that is not one, for every version:
#: (source, bytes, what the RemoteProtocolError says).
NOT_FRAMES: list[tuple[str, bytes, str]] = [
    (
        f"{D11} STOMP Frames, schematic (l.24-28)",
        spec("command", "header1:value1", "header2:value2", "", "Body^@"),
        "unknown command",
    ),
    (
        f"{ZH} 3 STOMP frames, schematic (l.27-30)",
        spec("COMMAND", "header1:value1", "header2:value2", "", "Body^@"),
        "unknown command",
    ),
    (
        f"{KO} frame structure, schematic (l.42-46)",
        spec("COMMAND", "header1:value1", "header2:value2", "", "Body^@"),
        "unknown command",
    ),
    (
        # Two heads without NULs: the second reads as a body CONNECT cannot have.
        f"{D11} Heart-beating, schematic (l.586-590)",
        spec("CONNECT", "heart-beat:<cx>,<cy>", "", "CONNECTED:", "heart-beat:<sx>,<sy>", ""),
        "may not have a body",
    ),
    (
        f"{ZH} 4.4 Heart-beating, schematic (l.162-165)",
        spec("CONNECT", "heart-beat:<cx>,<cy>", "", "CONNECTED:", "heart-beat:<sx>,<sy>", ""),
        "may not have a body",
    ),
    (
        f"{KO} heart-beating, schematic (l.158-162)",
        spec("CONNECT", "heart-beat:<cx>,<cy>", "", "CONNECTED", "heart-beat:<sx>,<sy>", ""),
        "may not have a body",
    ),
    (
        # Flattened, and misspelt: "UNSUBSRIBE id:0 ^@".
        f"{KO} client frames, UNSUBSCRIBE (l.198)",
        spec("UNSUBSRIBE", "id:0", "", "^@"),
        "unknown command",
    ),
]

#: The one example printed without its ^@: the frame never ends.
PARTIAL: list[tuple[str, bytes]] = [
    (
        f"{ZH} 6.1 MESSAGE, the SUBSCRIBE before it (l.328-330)",
        spec("SUBSCRIBE", "id:0", "destination:/queue/a", ""),
    ),
]
