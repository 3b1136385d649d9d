"""`python -m ensemble_zoo` runs the `ensemble-zoo` command."""

import sys

from ensemble_zoo_cli import main

sys.exit(main())
