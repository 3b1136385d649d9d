"""Plain keras-hub models from a LoRA-Ensemble causal LM and members
from keras-hub's LoRA files: one member's merged model, the frozen base
model, and the factors of keras-hub `.lora.h5` adapters."""

from ensemble_zoo.layers.lora_ensemble_experts import LoRAEnsembleExperts
from ensemble_zoo.layers.lora_ensemble_experts import expert_kernels
from ensemble_zoo.models.lora_ensemble.causal_lm import keras_hub_lora
from ensemble_zoo.models.lora_ensemble.causal_lm.decoder_adapters import plain_decoder_copy
from ensemble_zoo.models.lora_ensemble.causal_lm.families import TARGETS
from ensemble_zoo.models.lora_ensemble.causal_lm.families import block_sites
from ensemble_zoo.models.lora_ensemble.causal_lm.families import decoder_sites
from ensemble_zoo.utils.model_copies import copy_preprocessor


def plain_causal_lm(ensemble, member):
    """A keras-hub causal LM with the frozen weights and, unless
    `member` is `None`, member `member`'s adapters merged."""
    backbone = plain_decoder_copy(ensemble.backbone.decoder)
    sites, _ = decoder_sites(backbone, ensemble.targets, ensemble.backbone.adapted_blocks)
    for (parent, attribute), adapter in zip(sites, ensemble.backbone._adapters, strict=True):
        if member is None:
            continue  # the copy holds the frozen weights
        if isinstance(adapter, LoRAEnsembleExperts):
            _, kernels = expert_kernels(getattr(parent, attribute))
            merged = adapter.merged_kernels(member)
            for name, variable in kernels:
                variable.assign(merged[name])
        else:
            getattr(parent, attribute).kernel.assign(adapter.merged_kernel(member))
    return ensemble.keras_hub_class(
        backbone=backbone, preprocessor=copy_preprocessor(ensemble.preprocessor)
    )


def keras_hub_lora_factors(causal_lm, filepaths):
    """The members' factors of keras-hub LoRA files
    (`LoRAEnsembleCausalLM.from_keras_hub_lora`).

    Args:
        causal_lm: the keras-hub causal LM the adapters were trained on.
        filepaths: a `.lora.h5` path or a list of them, one per member.

    Returns:
        `(targets, ranks, factors, num_blocks, num_members)`: the adapted
        targets, their ranks, `{(block, target): [(A, B) per member]}`,
        the number of blocks and of files.
    """
    filepaths = [filepaths] if isinstance(filepaths, str) else list(filepaths)
    if not filepaths:
        raise ValueError("`filepaths` must name at least one `.lora.h5` file.")
    files = [keras_hub_lora.read_keras_hub_lora(path) for path in filepaths]
    layers = [
        layer for layer in causal_lm.backbone._flatten_layers(include_self=False) if layer.weights
    ]  # keras-hub's indexing of adapted layers
    blocks = causal_lm.backbone.transformer_layers
    where = {}
    for block_index, block in enumerate(blocks):
        for target, (parent, attribute) in block_sites(block, TARGETS, required=False):
            where[id(getattr(parent, attribute))] = (block_index, target)
    first_rank, first_layers = files[0]
    adapted = {}
    for index in sorted(first_layers):
        site = where.get(id(layers[index])) if index < len(layers) else None
        if site is None:
            raise ValueError(
                f"'{filepaths[0]}' adapts layer {index}, which is not a "
                f"projection LoRA-Ensemble adapts (targets {list(TARGETS)})."
            )
        adapted[site] = layers[index]
    for path, (rank, file_layers) in zip(filepaths[1:], files[1:]):
        if rank != first_rank or sorted(file_layers) != sorted(first_layers):
            raise ValueError(
                f"'{path}' adapts other layers or has another rank than "
                f"'{filepaths[0]}'; the members must share them."
            )
    targets = [t for t in TARGETS if any(site[1] == t for site in adapted)]
    if len(adapted) != len(blocks) * len(targets):
        raise ValueError(
            f"'{filepaths[0]}' adapts {sorted(set(s[1] for s in adapted))} "
            "in some blocks only; LoRA-Ensemble adapts the same "
            "projections in every block."
        )
    factors = {
        site: [
            keras_hub_lora.keras_hub_lora_factors(layer, *file_layers[layers.index(layer)])
            for _, file_layers in files
        ]
        for site, layer in adapted.items()
    }
    ranks = {t: factors[(0, t)][0][0].shape[1] for t in targets}
    return targets, ranks, factors, len(blocks), len(files)
