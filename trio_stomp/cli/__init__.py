"""The ``trio-stomp`` command: ``send``, ``listen`` and ``bench`` for any STOMP broker, and
``broker`` to run the embedded one. ``python -m trio_stomp.cli`` runs it too.

:func:`main` is the console script's entry point; everything else here is private.
"""

from ._main import main as main
