"""``python -m trio_stomp.cli``: the ``trio-stomp`` command."""

import sys

from ._main import main

sys.exit(main())
