"""The text of a `.sw` file and where it came from, so errors can point into it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swauto.errors import ParseError, SourceError, SourceLocation, SwautoError


@dataclass(frozen=True)
class Position:
    """1-based line and column of a node in its source text, counted as the lexer counts them: lines
    end at '\\n' only, columns are characters (code points) from the start of the line."""

    line: int
    column: int


@dataclass(frozen=True)
class Source:
    """A `.sw` text and its file name (`<string>` when given as text)."""

    name: str
    text: str

    @staticmethod
    def load(source: str | Path) -> Source:
        """A path to an existing file is read (it must be UTF-8); any other string is taken as `.sw` text."""
        if isinstance(source, Path) or ("\n" not in source and source.endswith(".sw")):
            path = Path(source)
            try:
                data = path.read_bytes()
            except OSError as error:
                raise SwautoError(f"cannot read {path}: {error.strerror}") from None
            try:
                return Source(str(path), data.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise _not_utf8(str(path), data, error) from None
        return Source("<string>", source)

    def line(self, number: int) -> str:
        """Line `number` (1-based) as the lexer counts lines, or '' past the end."""
        lines = self.text.split("\n")
        return lines[number - 1] if 0 < number <= len(lines) else ""

    def error(self, kind: type[SourceError], message: str, position: Position) -> SourceError:
        """A `kind` error at `position`, quoting that line (characters a terminal would not show as
        one column, such as tabs, form feeds or U+2028, are shown as spaces so the caret stays under
        its column)."""
        location = SourceLocation(self.name, position.line, position.column)
        return kind(message, location, displayable(self.line(position.line)))


def displayable(line: str) -> str:
    """`line` with every character that is not printable (tabs, control characters, line and
    paragraph separators) replaced by one space: same length, so columns still match."""
    return "".join(c if c.isprintable() else " " for c in line)


def _not_utf8(name: str, data: bytes, error: UnicodeDecodeError) -> ParseError:
    """A ParseError at the first byte that is not UTF-8, quoting its line (undecodable bytes shown as U+FFFD)."""
    before = data[: error.start]
    line = before.count(b"\n") + 1
    line_start = before.rfind(b"\n") + 1
    column = len(data[line_start : error.start].decode("utf-8", errors="replace")) + 1
    text = data[line_start:].split(b"\n", 1)[0].decode("utf-8", errors="replace")
    bad = " ".join(f"0x{byte:02x}" for byte in data[error.start : error.end])
    return ParseError(f"the file is not UTF-8 text: {bad} at byte offset {error.start} cannot be decoded",
                      SourceLocation(name, line, column), displayable(text))
