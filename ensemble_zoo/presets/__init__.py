"""Shipped presets: names, paths, loading and saving (offline, safe mode).

Example:

```python
import ensemble_zoo

ensemble_zoo.presets.list_presets()
model = ensemble_zoo.models.EnsembleClassifier.from_preset("vit_tiny_digits")
```
"""

from ensemble_zoo.presets.adapter_presets import save_adapter_preset
from ensemble_zoo.presets.preset_io import PresetError
from ensemble_zoo.presets.preset_io import get_preset_path
from ensemble_zoo.presets.preset_io import list_presets
from ensemble_zoo.presets.preset_io import load_preset
from ensemble_zoo.presets.preset_io import preset_metadata
from ensemble_zoo.presets.preset_io import preset_root
from ensemble_zoo.presets.preset_io import save_preset
from ensemble_zoo.presets.registry import PRESETS
