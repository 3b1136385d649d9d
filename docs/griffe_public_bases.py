"""A griffe extension for the API reference: a class's private bases
(`_SumMetric`, `_BatchEnsembleBackbone`, names starting with `_`) are
left out of its "Bases:" line, which then names what a user can import
(`keras_hub.models.ViTBackbone`, `keras.metrics.Metric`)."""

import griffe


class PublicBases(griffe.Extension):
    """Drops the bases whose last name component starts with `_`."""

    def on_class_instance(self, *, cls, **kwargs):
        cls.bases = [base for base in cls.bases if not str(base).rsplit(".", 1)[-1].startswith("_")]
