import sys

from ensemble_zoo_cli import main

sys.exit(main())
