"""Starting an ensemble's heads from a keras-hub classifier's head.

Shared by the conversions (`from_keras_hub`) of every method that keeps a
keras-hub backbone (LoRA-Ensemble, BatchEnsemble, Masksembles, MIMO).
"""


def resolve_head(classifier_classes, num_classes, reuse_head):
    """`(num_classes, reuse_head)` for a conversion from a keras-hub model.

    Args:
        classifier_classes: the keras-hub classifier's number of classes,
            or `None` when converting a bare backbone.
        num_classes: int or `None` (the classifier's).
        reuse_head: bool or `None` (reuse when the class counts match).
    """
    if classifier_classes is None:
        if num_classes is None:
            raise ValueError("Converting a backbone needs `num_classes` (the heads are new).")
        if reuse_head:
            raise ValueError("`reuse_head=True` needs a classifier, not a backbone.")
        return num_classes, False
    if num_classes is None:
        num_classes = classifier_classes
    if reuse_head is None:
        reuse_head = num_classes == classifier_classes
    if reuse_head and num_classes != classifier_classes:
        raise ValueError(
            f"`reuse_head=True` needs num_classes={classifier_classes} (the "
            f"classifier's); got num_classes={num_classes}."
        )
    return num_classes, bool(reuse_head)
