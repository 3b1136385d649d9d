"""Progress bars (tqdm) that can be switched off."""


def progress_bar(iterable, desc=None, total=None, enable=True):
    """Wraps `iterable` in a tqdm bar on stderr when `enable` is true."""
    if not enable:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)
