"""The names of the presets that ship with ensemble_zoo.

Each entry maps a preset name to its directory under the preset root
(`presets/` in a source checkout, `ensemble_zoo/_preset_files/` in an
installed wheel) and a one-line description. `metadata.json` inside the
directory holds the rest (method, members, parameters, test metrics).

A method's presets are registered beside the method, as keras-hub
registers presets beside each model: `ensemble_zoo/models/<method>/
<method>_presets.py` holds its `PRESETS`. Those files are pure data, read
here by their paths (`runpy`), not imported: this module and they import
nothing, so the command line lists presets without importing Keras, and
`ensemble_zoo.presets` never imports `ensemble_zoo.models`. The base
models that the methods start from (keras-hub's own classes) are listed
here, in `BASE_PRESETS`.
"""

import os
import runpy

#: The base models: keras-hub's own ViT and Gemma classes, trained here.
BASE_PRESETS = {
    "vit_tiny_digits": {
        "path": "vit_tiny_digits",
        "description": (
            "The base model: a 4-layer, 6-head keras-hub ViT (hidden 48, "
            "patch 2) trained on the bundled digits 0-7; a one-member "
            "ensemble."
        ),
    },
    "vit_gap_tiny_digits": {
        "path": "vit_gap_tiny_digits",
        "description": (
            "vit_tiny_digits' backbone and recipe with an average-pooled "
            "head (keras-hub pooling='gap'), the base of tile_vit_tiny_digits; "
            "a one-member ensemble."
        ),
    },
    "gemma_tiny_arithmetic": {
        "path": "gemma_tiny_arithmetic",
        "description": (
            "A 4-layer keras-hub GemmaCausalLM (hidden 64, character-level "
            "tokenizer) pretrained on 1,000 of the bundled arithmetic task's "
            "sums (a + b, a and b in 0-49); one model."
        ),
    },
}

#: `ensemble_zoo/models`, beside this package.
MODELS_DIRECTORY = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"
)


def method_preset_files():
    """The methods' `<method>_presets.py` files, sorted by path."""
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(MODELS_DIRECTORY)
        for name in names
        if name.endswith("_presets.py")
    )


def method_presets(method):
    """The `PRESETS` of the method package `method`'s
    `<method>_presets.py` (`{}` when it has none)."""
    path = os.path.join(MODELS_DIRECTORY, method, f"{method}_presets.py")
    return runpy.run_path(path)["PRESETS"] if os.path.exists(path) else {}


def _all_presets():
    presets = dict(BASE_PRESETS)
    for path in method_preset_files():
        for name, entry in runpy.run_path(path)["PRESETS"].items():
            if name in presets:
                raise ValueError(f"Preset {name!r} is registered twice (again in {path}).")
            presets[name] = entry
    return presets


#: Every shipped preset: `BASE_PRESETS` and the methods' own.
PRESETS = _all_presets()
