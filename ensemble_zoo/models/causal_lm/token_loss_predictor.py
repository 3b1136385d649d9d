"""The old path of `ensemble_zoo.models.loss_prediction.token_loss_predictor`, which the configs of
presets saved before the move name: this module is that one (an alias kept
for one release)."""

import sys

from ensemble_zoo.models.loss_prediction import token_loss_predictor

sys.modules[__name__] = token_loss_predictor
