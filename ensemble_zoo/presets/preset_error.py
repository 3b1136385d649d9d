"""The error of a missing or damaged preset (a leaf module)."""


class PresetError(ValueError):
    """A preset could not be found or is damaged; the message says which
    file is wrong and how."""
