"""`LoRAEnsembleExperts` on a keras-hub mixture-of-experts block: each
member, in either row layout, equals the block whose stacked expert
kernels are `W + A_m B_m`, merged in NumPy."""

import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np

from ensemble_zoo.layers import LoRAEnsembleExperts
from ensemble_zoo.layers.lora_ensemble_experts import expert_kernels


@pytest.mark.parametrize("layout", ["member_major", "batch_major"])
def test_each_member_equals_the_block_with_its_merged_kernels(layout):
    backbone = keras_hub.models.MixtralBackbone(
        vocabulary_size=16,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=8,
        intermediate_dim=16,
        num_experts=4,
        top_k=2,
    )
    block = backbone.transformer_layers[0]._sparse_moe_block
    experts = LoRAEnsembleExperts(block, num_members=2, rank=2, seed=0, member_layout=layout)
    rng = np.random.default_rng(0)
    for factors in experts.kernel_adapters:
        factors.lora_b.assign(rng.normal(size=factors.lora_b.shape) * 0.3)
    x = rng.normal(size=(6, 5, 8)).astype("float32")
    out = to_np(experts(x)[0])
    rows = (
        (lambda a: a.reshape(2, 3, *a.shape[1:]))
        if layout == "member_major"
        else (lambda a: a.reshape(3, 2, *a.shape[1:]).swapaxes(0, 1))
    )
    _, kernels = expert_kernels(block)
    frozen = [to_np(v) for _, v in kernels]
    for member in range(2):
        for (_, variable), w, factors in zip(kernels, frozen, experts.kernel_adapters):
            a, b = to_np(factors.lora_a)[member], to_np(factors.lora_b)[member]
            variable.assign(w + np.einsum("eir,ero->eio", a, b))
        expected = to_np(block(rows(x)[member])[0])
        np.testing.assert_allclose(rows(out)[member], expected, rtol=1e-5, atol=1e-4)
    for (_, variable), w in zip(kernels, frozen):
        variable.assign(w)
    assert np.abs(rows(out)[0] - rows(out)[1]).max() > 1e-3
    with pytest.raises(ValueError, match="must be a multiple of 2"):
        experts(x[:5])
    with pytest.raises(ValueError, match="holds no expert bank"):
        LoRAEnsembleExperts(backbone.transformer_layers[0]._self_attention_layer, 2, 2)
