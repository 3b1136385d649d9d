"""Progress that reaches the user on a terminal and in a log alike.

On a terminal or in a Jupyter notebook, a tqdm bar redraws in place. When
stderr is a file or a pipe (CI logs, `| tee`), carriage-return updates of
nested bars become lines of junk, so no bar is drawn there; instead the
outermost loop prints plain lines to stderr: one when it starts (how many
steps), one per step when the steps are named (`[3/17] name`), and one
when it ends, each with the elapsed time. Loops nested inside a loop that
prints lines stay silent, so a log gets one line per preset, not one per
batch. (A loop in another thread starts its own lines.)
"""

import contextvars
import sys
import time
import weakref

#: A weak reference to the loop that prints lines (its generator): nested
#: loops stay quiet while it runs. A generator that has finished, was
#: closed or was collected no longer counts, so nothing needs resetting.
_LINES = contextvars.ContextVar("ensemble_zoo_progress_lines", default=None)


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


def _lines_active():
    reference = _LINES.get()
    loop = reference() if reference is not None else None
    return loop is not None and loop.gi_frame is not None


def _print_line(text):
    # One write per line, so that lines of two threads do not interleave.
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _progress_lines(iterable, desc, total, name_steps, unit):
    start = time.perf_counter()
    if total is None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    count = "" if total is None else f" {total}"
    _print_line(f"{desc}:{count} {unit}")
    done = 0
    for item in iterable:
        if name_steps:
            elapsed = format_seconds(time.perf_counter() - start)
            of = "" if total is None else f"/{total}"
            _print_line(f"{desc} [{done + 1}{of}] {item} (elapsed {elapsed})")
        yield item
        done += 1
    _print_line(f"{desc}: {done} {unit} done in {format_seconds(time.perf_counter() - start)}")


def progress_note(text, enable=True):
    """Prints one line of progress to stderr (a stage without a loop),
    unless disabled or inside a loop that prints lines."""
    if enable and not _lines_active():
        _print_line(text)


def progress_bar(iterable, desc=None, total=None, enable=True, name_steps=False, unit=None):
    """Shows the progress of a loop over `iterable`.

    Args:
        iterable: the items the loop goes over.
        desc: str, what the loop does (`"compare"`, `"predict test"`).
        total: optional int, the number of items when `len` cannot tell.
        enable: bool. `False` returns `iterable` unchanged.
        name_steps: bool. When stderr is not interactive, also print one
            line per item naming it (`str(item)`: for a few long steps
            such as presets, not for batches).
        unit: optional str naming the items in the lines (default
            `"steps"` with `name_steps`, else `"batches"`).

    Returns:
        A tqdm bar over `iterable` when stderr is interactive; otherwise,
        for the outermost loop, a generator that prints plain progress
        lines to stderr; `iterable` itself when disabled or nested inside a
        loop that prints lines.
    """
    if not enable:
        return iterable
    if not interactive_stderr():
        if _lines_active():
            return iterable
        unit = unit or ("steps" if name_steps else "batches")
        lines = _progress_lines(iterable, desc or "progress", total, name_steps, unit)
        _LINES.set(weakref.ref(lines))
        return lines
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)
