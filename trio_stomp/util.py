"""Small pure helpers that trio_stomp and the code built on it (bridges) share.

One copy each, so that a fix lands everywhere:

- :class:`Endpoint`: a broker URL, parsed (``Endpoint.from_url``); its
  ``url`` is the credential-free form for messages and logs.
- :func:`redact_url`: any URL-ish text fit to print: the credentials become
  ``LOGIN:***``, whatever characters the passcode holds (``/ @ : %``), even
  when the text does not parse.
- :func:`parse_host_port`, :func:`format_host_port`, :func:`bracket_host`:
  ``HOST:PORT`` with IPv6 brackets.
- :func:`backoff_delay`: exponential backoff with a cap and jitter (the
  client's reconnect and the bridges' retries follow this one curve).
- :func:`unwrap_group`: the one exception inside nested single-exception
  groups, as raised at a public boundary.
- :func:`printable`: text fit to print on a terminal or in a log, its control
  characters (C0, C1, ESC, DEL, bidi controls, line separators) written as
  escapes; every printer of trio_stomp and bridges uses it.

Nothing here does I/O or imports Trio.
"""

from ._address import bracket_host as bracket_host
from ._address import format_host_port as format_host_port
from ._address import parse_host_port as parse_host_port
from ._backoff import backoff_delay as backoff_delay
from ._groups import unwrap_group as unwrap_group
from ._printable import printable as printable
from ._url import Endpoint as Endpoint
from ._url import redact_url as redact_url
