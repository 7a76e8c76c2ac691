"""`python -m gradtui`: the same as the `gradtui` command."""

import sys

from gradtui.cli.entry import main

sys.exit(main())
