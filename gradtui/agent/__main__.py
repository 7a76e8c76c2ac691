"""`python -m gradtui.agent`: a child agent started by the UI (see gradtui.agent.main)."""

import sys

from gradtui.agent.main import child_main

sys.exit(child_main())
