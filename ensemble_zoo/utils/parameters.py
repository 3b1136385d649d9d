"""Parameter counting that leaves out masks (which are not parameters)."""

import numpy as np

#: Variables with these names are structural masks, not parameters.
MASK_VARIABLE_NAMES = ("head_mask",)


def parameter_count(model):
    """Number of scalars in `model`'s weights, head masks excluded.

    Equals `model.count_params()` for models without masks. Hydra models
    hold a non-trainable `(members, head_slots)` head mask per layer that
    only records which heads exist; it is not counted, as the papers do
    not count it.
    """
    return int(
        sum(int(np.prod(w.shape)) for w in model.weights if w.name not in MASK_VARIABLE_NAMES)
    )
