"""Variable naming helpers."""

import contextlib

import keras


@contextlib.contextmanager
def path_scope(path):
    """Nested `keras.name_scope`s reproducing a layer's `path`.

    Layers added to a built model (adapters, seed generators) are created
    under the scope of the layer they attach to, so their variables get
    unique paths such as `encoder/block_0/mha/query_lora_ensemble/lora_a`.
    The PyTorch backend keys a model's parameters by path, so two
    variables sharing one would hide one of them from `model.parameters()`
    (and from `zero_grad`).
    """
    with contextlib.ExitStack() as stack:
        for part in path.split("/"):
            if part:
                stack.enter_context(keras.name_scope(part))
        yield
