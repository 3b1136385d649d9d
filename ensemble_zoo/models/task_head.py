"""The output dropout and classification head that every zoo task builds."""

import keras


def task_head(backbone, dropout, head_cls, *args, **kwargs):
    """A task's output dropout and head, in the backbone's dtype policy.

    Named as keras-hub's classifiers name theirs (`"output_dropout"`,
    `"predictions"`), so weights files keep their paths.

    Args:
        backbone: the task's backbone (its `dtype_policy` is used).
        dropout: float, the rate of the output dropout.
        head_cls: the head's layer class (`keras.layers.Dense`,
            `GroupedDense`, `BatchEnsembleDense`...).
        *args, **kwargs: the head's other constructor arguments.

    Returns:
        `(output_dropout, head)`.

    Example:

    ```python
    import keras
    from ensemble_zoo.models.task_head import task_head

    backbone = keras.layers.Identity(dtype="bfloat16")
    output_dropout, head = task_head(backbone, 0.1, keras.layers.Dense, 10)
    head.name, head.dtype_policy.name  # ('predictions', 'bfloat16')
    ```
    """
    dtype = backbone.dtype_policy
    output_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="output_dropout")
    return output_dropout, head_cls(*args, dtype=dtype, name="predictions", **kwargs)
