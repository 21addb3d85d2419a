"""`python -m mlcost …` runs the same command as `mlcost …`."""
import sys

from mlcost.cli import main

sys.exit(main())
