"""Progress that reaches the user on a terminal and in a log alike.

On a terminal or in a Jupyter notebook, a tqdm bar redraws in place. When
stderr is a file or a pipe (CI logs, `| tee`), carriage-return updates of
nested bars become lines of junk, so no bar is drawn there; instead the
outermost loop prints plain lines to stderr: one when it starts (how many
steps), one per step when the steps are named (`[3/17] name`), and one
when it ends, each with the elapsed time. Loops nested inside a loop that
prints lines stay silent, so a log gets one line per preset, not one per
batch.
"""

import contextvars
import sys
import time

#: Whether an enclosing loop already prints lines (nested loops stay quiet).
_LINES_ACTIVE = contextvars.ContextVar("ensemble_zoo_progress_lines", default=False)


def interactive_stderr():
    """Whether stderr can show a live progress bar: a TTY or a notebook."""
    if "ipykernel" in sys.modules:
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def format_seconds(seconds):
    """`"42.0 s"` under a minute, `"3 min 05 s"` above."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes} min {seconds:02d} s"


def _print_line(text):
    print(text, file=sys.stderr, flush=True)


def _progress_lines(iterable, desc, total, name_steps):
    outer = _LINES_ACTIVE.get()
    _LINES_ACTIVE.set(True)
    start = time.perf_counter()
    try:
        if total is None:
            try:
                total = len(iterable)
            except TypeError:
                total = None
        count = "" if total is None else f" {total}"
        unit = "steps" if name_steps else "batches"
        _print_line(f"{desc}:{count} {unit}")
        done = 0
        for item in iterable:
            if name_steps:
                elapsed = format_seconds(time.perf_counter() - start)
                of = "" if total is None else f"/{total}"
                _print_line(f"{desc} [{done + 1}{of}] {item} (elapsed {elapsed})")
            yield item
            done += 1
        _print_line(
            f"{desc}: {done} {unit} done in "
            f"{format_seconds(time.perf_counter() - start)}"
        )
    finally:
        # `set`, not `reset(token)`: a generator closed early may be
        # finalised in another context, where the token is not valid.
        _LINES_ACTIVE.set(outer)


def progress_note(text, enable=True):
    """Prints one line of progress to stderr (a stage without a loop),
    unless disabled or inside a loop that prints lines."""
    if enable and not _LINES_ACTIVE.get():
        _print_line(text)


def progress_bar(iterable, desc=None, total=None, enable=True, name_steps=False):
    """Shows the progress of a loop over `iterable`.

    Args:
        iterable: the items the loop goes over.
        desc: str, what the loop does (`"presets"`, `"predict test"`).
        total: optional int, the number of items when `len` cannot tell.
        enable: bool. `False` returns `iterable` unchanged.
        name_steps: bool. When stderr is not interactive, also print one
            line per item naming it (for a few long steps such as presets,
            not for batches).

    Returns:
        A tqdm bar over `iterable` when stderr is interactive; otherwise,
        for the outermost loop, a generator that prints plain progress
        lines to stderr; `iterable` itself when disabled or nested inside a
        loop that prints lines.
    """
    if not enable:
        return iterable
    if not interactive_stderr():
        if _LINES_ACTIVE.get():
            return iterable
        return _progress_lines(iterable, desc or "progress", total, name_steps)
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)
