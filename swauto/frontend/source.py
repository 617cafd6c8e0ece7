"""The text of a `.sw` file and where it came from, so errors can point into it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swauto.errors import SourceError, SourceLocation


@dataclass(frozen=True)
class Position:
    """1-based line and column of a node in its source text."""

    line: int
    column: int


@dataclass(frozen=True)
class Source:
    """A `.sw` text and its file name (`<string>` when given as text)."""

    name: str
    text: str

    @staticmethod
    def load(source: str | Path) -> Source:
        """A path to an existing file is read; any other string is taken as `.sw` text."""
        if isinstance(source, Path) or ("\n" not in source and source.endswith(".sw")):
            path = Path(source)
            try:
                return Source(str(path), path.read_text())
            except OSError as error:
                from swauto.errors import SwautoError

                raise SwautoError(f"cannot read {path}: {error.strerror}") from None
        return Source("<string>", source)

    def line(self, number: int) -> str:
        lines = self.text.splitlines()
        return lines[number - 1] if 0 < number <= len(lines) else ""

    def error(self, kind: type[SourceError], message: str, position: Position) -> SourceError:
        location = SourceLocation(self.name, position.line, position.column)
        return kind(message, location, self.line(position.line))
