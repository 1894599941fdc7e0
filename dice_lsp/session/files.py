"""The files the session reads and writes besides the editor's open ones: a file a command names, a new solution, and
the `file:` URIs that name them. Called on the session's file threads (Session.read), never on the event loop."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from dice_lsp.anatomy import read_reference


def uri_path(uri: str) -> Path | None:
    """The file a `file:` URI names; None for any other scheme (an unsaved buffer is `untitled:`)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = url2pathname(parsed.path)
    return Path(f"//{parsed.netloc}{path}" if parsed.netloc else path)


def uri_name(uri: str) -> str:
    """The file's name as a title shows it (the whole URI when it has none)."""
    return Path(urlparse(uri).path).name or uri


def read_text(path: Path) -> str:
    """A file a command names that is not open: read as a reference is (a regular file, at most a MiB); "" when it
    cannot be read."""
    try:
        return read_reference(path)
    except OSError:
        return ""


def write_new(path: Path, text: str) -> None:
    """Write a new file, never over one that exists (it may have appeared since its name was chosen)."""
    with open(path, "x", encoding="utf-8") as out:
        out.write(text)
