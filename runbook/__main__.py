import sys

from runbook.cli import main

sys.exit(main())
