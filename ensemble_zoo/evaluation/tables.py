"""Plain-text and Markdown tables for reports and leaderboards."""


def format_value(value, digits=4):
    """A table cell: floats rounded, None as '-', ints with separators."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def text_table(rows, headers):
    """Left-aligned columns separated by two spaces, with a rule."""
    cells = [[format_value(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells + [list(headers)]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def markdown_table(rows, headers):
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        lines.append("| " + " | ".join(format_value(c) for c in row) + " |")
    return "\n".join(lines)
