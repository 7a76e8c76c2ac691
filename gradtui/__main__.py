"""`python -m gradtui`: the same as the `gradtui` command."""

import sys

from gradtui.cli import main

sys.exit(main())
