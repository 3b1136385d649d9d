"""The old path of `ensemble_zoo.models.lora_ensemble.causal_lm.lora_ensemble_causal_lm`, which
the configs of
presets saved before the move name: this module is that one (an alias kept
for one release)."""

import sys

from ensemble_zoo.models.lora_ensemble.causal_lm import lora_ensemble_causal_lm

sys.modules[__name__] = lora_ensemble_causal_lm
