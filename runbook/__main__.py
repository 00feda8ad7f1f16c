import sys

from runbook.cli.app import main

sys.exit(main())
