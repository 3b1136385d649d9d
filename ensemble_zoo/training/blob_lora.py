"""BLoB: samples of a LoRA fine-tune's variational adapters as the members
of one LoRA-Ensemble.

BLoB (Wang et al. 2024, "BLoB: Bayesian Low-Rank Adaptation by
Backpropagation for Large Language Models", arXiv 2406.11675) learns a
Gaussian over each LoRA `A` matrix by backpropagation; build the model with
`blob={"kl_weight": ...}` (`LoRAEnsembleImageClassifier`,
`LoRAEnsembleTextClassifier`, `LoRAEnsembleClassifier`,
`LoRAEnsembleCausalLM.from_keras_hub`) and train it with `fit`: the
adapters add flipout noise and the KL term (`ensemble_zoo.layers.
blob_posterior` has the formulas and the decisions). `blob_samples` then
draws `S` weight samples into the members of one LoRA-Ensemble, so that
`S` samples cost what `S` members cost and every ensemble tool applies.
The authors' code re-runs the model once per sample (10 at evaluation),
each pass drawing fresh flipout noise per example: the same marginal
per example, here with one draw of `A` per member shared by the batch.
"""

import numpy as np
from keras import ops

from ensemble_zoo.layers.blob_posterior import blob_sigma
from ensemble_zoo.training.kfac import lora_adapters
from ensemble_zoo.training.member_stacking import num_members_of
from ensemble_zoo.training.member_stacking import with_members
from ensemble_zoo.utils.validation import check_positive_int


def blob_samples(model, num_samples, seed=None, name=None):
    """A LoRA-Ensemble whose members are samples of a BLoB model's adapters.

    Args:
        model: a one-member LoRA-Ensemble built with `blob` (its `A`
            matrices Gaussian), trained or not: a classifier or a causal
            LM. It is not changed.
        num_samples: int, the samples, the new model's members (10 in the
            authors' evaluation).
        seed: optional int for the draws.
        name: optional name of the new model. Defaults to `model`'s name
            with `"_samples"` appended.

    Returns:
        A model of `model`'s class without `blob`, with `num_samples`
        members: member `s` has `A_s = mu + sigma * E_s` (`E_s` standard
        normal, `sigma = rho^2`) in every adapter and `model`'s `B`, head
        and frozen weights.

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=4, num_layers=1, num_heads=2,
        hidden_dim=8, mlp_dim=16,
    )
    blob = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(
        keras_hub.models.ViTImageClassifier(backbone=vit, num_classes=3, preprocessor=None),
        num_members=1, rank=2, a_gain=1.0, seed=0, blob={"kl_weight": 1 / 16},
    )
    x = np.random.default_rng(0).uniform(size=(16, 8, 8, 1)).astype("float32")
    blob.compile()
    blob.fit(x, np.arange(16) % 3, epochs=1, verbose=0)
    members = ez.training.blob_samples(blob, num_samples=8, seed=0)
    members.predict(x[:2], verbose=0).shape  # (2, 8, 3)
    ```
    """
    num_samples = check_positive_int(num_samples, "num_samples")
    adapters = [adapter for _, _, adapter in lora_adapters(model)]
    if not adapters or any(getattr(a, "blob", None) is None for a in adapters):
        raise ValueError(
            f"`model` ({type(model).__name__} '{model.name}') has no BLoB adapters; build it "
            "with `blob={'kl_weight': ...}` and train it with `fit`."
        )
    members = num_members_of(model)
    if members != 1:
        raise ValueError(
            f"`model` has {members} members; `blob_samples` takes a one-member BLoB model "
            "(its samples become the members)."
        )
    rng = np.random.default_rng(seed)
    samples = {}
    for adapter in adapters:
        mean = np.asarray(ops.convert_to_numpy(adapter.lora_a[0]), np.float64)
        sigma = np.asarray(ops.convert_to_numpy(blob_sigma(adapter.lora_a_rho[0])), np.float64)
        noise = rng.standard_normal((num_samples,) + mean.shape)
        samples[id(adapter.lora_a)] = (mean + sigma * noise).astype(adapter.lora_a.dtype)
    variational = {id(adapter.lora_a_rho) for adapter in adapters}

    def values(source, member_axis):
        if id(source) in samples:
            return samples[id(source)]
        value = ops.convert_to_numpy(source)
        return np.repeat(value, num_samples, axis=0) if member_axis else value

    return with_members(
        model,
        num_samples,
        values,
        name=name or f"{model.name}_samples",
        changes={"blob": None},
        sources=[w for w in model.weights if id(w) not in variational],
    )
