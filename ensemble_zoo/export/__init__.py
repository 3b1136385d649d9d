"""Export of zoo models to every format Keras serves, with the
uncertainty outputs, and the runtimes that check them.

`model.export(path, format=...)` on every zoo classifier calls
`export_model`; `ExportedModel(path)` runs what it wrote.
"""

from ensemble_zoo.export.export_model import ExportError
from ensemble_zoo.export.export_model import export_model
from ensemble_zoo.export.formats import FORMATS
from ensemble_zoo.export.formats import supported_formats
from ensemble_zoo.export.runtimes import ExportedModel
from ensemble_zoo.export.serving import ServingModel

__all__ = [
    "ExportError",
    "ExportedModel",
    "FORMATS",
    "ServingModel",
    "export_model",
    "supported_formats",
]
