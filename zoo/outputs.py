"""The one rule for every output a user names (consolidate `out=`, export `dir=`, evaluate `output=`,
`save_pretrained`'s folder, the embedding CLI's `output=`): zoo writes a new path, or replaces what zoo itself
wrote there (known by what zoo writes into it: a checkpoint's zoo section, an export's config.json, ...).
Anything else, and a place that cannot be written, is refused naming the key and the path, before any work."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

NEW_PATH = "choose a new path or remove it first"


class OutputError(ValueError):
    """A user-named output zoo must not (or cannot) write; the apps show it as one `error:` line."""


@dataclass(frozen=True)
class Output:
    """An output a user names: the key it is given by, what zoo writes there, and how zoo knows its own."""

    key: str  # as the user wrote it: "out", "dir", "output", "save_pretrained path"
    what: str  # in errors: "a zoo checkpoint", "a zoo export"
    folder: bool  # a folder (an export) or one file
    ours: Callable[[Path], bool]  # whether zoo wrote what is at the path now (it may be replaced)
    example: str = ""  # a file name to suggest when a file output is given a folder: "model.ckpt"
    replaces: str = "what it wrote itself"  # in errors: "zoo replaces only <replaces>"

    def check(self, path: str | os.PathLike) -> Path:
        """`path` if zoo may write it: new, an empty folder (for a folder), or zoo's own earlier output, in a
        place that can be written; otherwise OutputError naming the key, the path and what is allowed."""
        path = Path(path)
        named = f"{self.key}={path}"
        if path.is_dir() != self.folder and os.path.lexists(path):
            if self.folder:
                raise OutputError(f"{named} is a file, not a folder ({self.what} is a folder); {NEW_PATH}.")
            raise OutputError(f"{named} is a folder, not a file ({self.what} is one file); name a new file, "
                              f"e.g. {self.key}={path / (self.example or 'out')}.")
        if os.path.lexists(path) and not (self.folder and path.is_dir() and not any(path.iterdir())):
            if not self.ours(path):
                raise OutputError(f"{named} exists and is not {self.what}; zoo replaces only "
                                  f"{self.replaces}, so {NEW_PATH}.")
        writable_place(named, path)
        return path


def writable_place(named: str, path: Path) -> None:
    """OutputError unless `path` can be created or replaced: its nearest existing folder above it is a folder
    zoo may write in (`named`: how the user gave it, `dir=out`)."""
    above = path.parent.absolute()
    while not os.path.lexists(above) and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise OutputError(f"{named} cannot be written: {above} is a file, not a folder; {NEW_PATH}.")
    if not os.access(above, os.W_OK | os.X_OK):
        raise OutputError(f"{named} cannot be written: no permission to write in {above} (read-only?); "
                          f"choose a folder you can write in.")


def write_failure(named: str, err: OSError) -> OutputError:
    """An OS error met while starting to write an output, in the user's words (never a staging name)."""
    return OutputError(f"{named} cannot be written: {err.strerror or err}; choose a folder you can write in.")
