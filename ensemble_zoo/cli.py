"""The `ensemble-zoo` command; see `ensemble_zoo_cli` (kept outside this
package so that `--help` does not import Keras)."""

import sys

from ensemble_zoo_cli import DEFAULT_OUTPUT  # noqa: F401
from ensemble_zoo_cli import compared_preset_names  # noqa: F401
from ensemble_zoo_cli import dataset_names  # noqa: F401
from ensemble_zoo_cli import main
from ensemble_zoo_cli import preset_names  # noqa: F401
from ensemble_zoo_cli import trained_preset_names  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
