from ensemble_zoo.models.baselines.l2_attention_backbone import L2AttentionViTBackbone
from ensemble_zoo.models.baselines.mc_dropout_backbone import MCDropoutBackbone
from ensemble_zoo.models.baselines.mc_dropout_classifier import MCDropoutClassifier
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method

register_method(Method(name="baselines", tasks=(MCDropoutClassifier,)))
