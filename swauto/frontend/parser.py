"""Parse `.sw` text into `swauto.frontend.ast` nodes; syntax errors become `ParseError` with a caret.

Nothing here recurses over the input's nesting: Lark's LALR parser keeps its own stack, the tree is
checked for absurd nesting by an explicit walk, and turned into the AST by a non-recursive
transformer, so no input can exhaust Python's stack.
"""

from __future__ import annotations

import hashlib
import io
from functools import cache
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Transformer_NonRecursive, v_args

from swauto.errors import ParseError
from swauto.frontend import ast
from swauto.frontend.integers import MAX_SIZE
from swauto.frontend.source import Position, Source

# How the grammar's regular-expression terminals read in an error message.
_TERMINAL_WORDS = {"NAME": "a name", "INT": "an integer", "$END": "the end of the file"}

# Nesting beyond these is refused: the checker, the passes and the backends walk expressions and loop
# nests recursively (a host kernel of 300 nested loops exhausts Python's stack). Flat constructs (a
# sum of any number of terms, a run of minus signs, parentheses around one expression) do not nest.
MAX_EXPRESSION_DEPTH = 64
MAX_LOOP_DEPTH = 64
_EXPRESSION_RULES = frozenset({"sum", "product", "neg", "function"})


_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


@cache
def _parser() -> lark.Lark:
    """The LALR parser of the grammar. Building its tables takes most of a small compile (about 70 ms),
    so the built parser is kept in the cache folder under a name that changes with the grammar, the
    options and Lark's version, behind a checksum of its bytes (a damaged file is never unpickled:
    damage can make unpickling slow or worse). A damaged file is built again and rewritten (said once,
    like every cache entry); an unusable folder means building it every time."""
    from swauto.cache import cache_dir, warn_once, warn_unusable, write_atomically

    grammar = resources.files("swauto.grammar").joinpath("swauto.lark").read_text()
    key = hashlib.sha256(f"{grammar}{sorted(_OPTIONS.items())}{lark.__version__}".encode()).hexdigest()[:24]
    path = cache_dir() / "parser" / f"swauto-{key}.lark"
    try:
        stored = path.read_bytes()
    except FileNotFoundError:
        stored = None
    except OSError as error:
        warn_unusable(error)
        stored = None
    if stored is not None:
        checksum, _, payload = stored.partition(b"\n")
        if checksum == hashlib.sha256(payload).hexdigest().encode():
            try:
                return lark.Lark.load(io.BytesIO(payload))
            except Exception as error:  # noqa: BLE001 - a whole file Lark cannot load (another version's)
                warn_once("damaged", path, f"the cached parser {path} cannot be loaded ({type(error).__name__}); "
                                           "building it again")
        else:
            warn_once("damaged", path, f"the cached parser {path} is damaged; building it again")
    parser = lark.Lark(grammar, **_OPTIONS)
    saved = io.BytesIO()
    parser.save(saved)
    payload = saved.getvalue()
    try:
        write_atomically(path, hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    except OSError as error:
        warn_unusable(error)
    return parser


def _position(item: Token | lark.Tree | object) -> Position:
    if isinstance(item, Token):
        return Position(item.line or 1, item.column or 1)
    meta = getattr(item, "meta", None)
    if meta is not None and not meta.empty:
        return Position(meta.line, meta.column)
    return Position(item.position.line, item.position.column)


def _describe(terminal: str) -> str:
    if terminal in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[terminal]
    try:
        pattern = _parser().get_terminal(terminal).pattern
    except KeyError:
        return terminal.lower()
    return f"'{pattern.value}'" if pattern.type == "str" else terminal.lower()


def _expected(terminals: set[str]) -> str:
    words = sorted({_describe(t) for t in terminals if not t.startswith("__")})
    if not words:
        return "something else"
    if len(words) == 1:
        return words[0]
    return "one of " + ", ".join(words)


def parse(source: str | Path | Source) -> ast.Operator:
    """Parse one operator. `source` is a path, `.sw` text or a `Source`."""
    src = source if isinstance(source, Source) else Source.load(source)
    try:
        tree = _parser().parse(src.text)
    except lark.UnexpectedCharacters as error:
        where = Position(error.line, error.column)
        found = src.text[error.pos_in_stream] if error.pos_in_stream < len(src.text) else ""
        raise src.error(
            ParseError, f"unexpected character {found!r}; expected {_expected(error.allowed)}", where
        ) from None
    except lark.UnexpectedToken as error:
        token = error.token
        if token.type == "$END":  # LALR reports the end of input as a token borrowing the last one's place
            where = Position(token.end_line or 1, token.end_column or 1)  # just after the last token
            found = "end of file"
        else:
            where = Position(token.line, token.column)
            found = repr(_shorten(str(token)))
        # The parse table's set for this state holds LALR's merged lookaheads; `accepts` tries each terminal.
        expected = error.interactive_parser.accepts() if error.interactive_parser is not None else error.expected
        raise src.error(ParseError, f"unexpected {found}; expected {_expected(expected)}", where) from None
    _check_limits(tree, src)
    return _ToAst().transform(tree)


def _check_limits(tree: lark.Tree, src: Source) -> None:
    """Refuse, at the first place in the text, nesting deeper than the limits and integers larger than
    MAX_SIZE (an explicit walk: the tree may be deeper than Python's stack)."""
    stack: list[tuple[lark.Tree | Token, int, int]] = [(tree, 0, 0)]
    while stack:
        node, expressions, loops = stack.pop()
        if isinstance(node, Token):
            if node.type == "INT" and (len(node) > 30 or int(node) > MAX_SIZE):
                raise src.error(ParseError, f"integer {_shorten(node)} is too large; swauto's sizes are at most "
                                f"{MAX_SIZE} (2**31 - 1)", _position(node))
            continue
        if not isinstance(node, lark.Tree):
            continue  # an absent optional part
        if node.data in _EXPRESSION_RULES:
            expressions += 1
            if expressions > MAX_EXPRESSION_DEPTH:
                raise src.error(ParseError, f"expression nested too deeply (the limit is {MAX_EXPRESSION_DEPTH} "
                                "levels of operators and functions)", _position(node))
        elif node.data == "for_loop":
            loops += 1
            if loops > MAX_LOOP_DEPTH:
                raise src.error(ParseError, f"loops nested too deeply (the limit is {MAX_LOOP_DEPTH})",
                                _position(node))
        # Reversed, so children are visited in the order of the text and the first offence is reported.
        stack.extend((child, expressions, loops) for child in reversed(node.children))


def _shorten(text: str) -> str:
    """A long token, cut for a message."""
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]} ({len(text)} characters)"


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    """Turns Lark's parse tree into `ast` dataclasses, keeping each node's position (without recursion)."""

    @staticmethod
    def _at(meta: lark.tree.Meta) -> Position:
        return Position(meta.line, meta.column)

    # expressions
    def number(self, meta, children):
        return ast.Number(int(children[0]), self._at(meta))

    def name(self, meta, children):
        return ast.Name(str(children[0]), self._at(meta))

    def sum(self, meta, children):
        """`a + b - c` (one flat node) as left-nested BinaryOps, all at the position of the whole sum."""
        result = children[0]
        for operator, operand in zip(children[1::2], children[2::2], strict=True):
            result = ast.BinaryOp(str(operator), result, operand, self._at(meta))
        return result

    product = sum

    def neg(self, meta, children):
        """A run of minus signs: a negation when their count is odd."""
        *signs, operand = children
        return ast.Negate(operand, self._at(meta)) if len(signs) % 2 else operand

    def function(self, meta, children):
        return ast.Function(str(children[0]), tuple(children[1:]), _position(children[0]))

    # declarations
    def param(self, meta, children):
        name, default = children
        if default is not None:
            default = int(default) if default.type == "INT" else str(default)
        return ast.Param(str(name), default, _position(name))

    def let(self, meta, children):
        return ast.Let(str(children[0]), children[1], _position(children[0]))

    def require(self, meta, children):
        left, op, right = children
        return ast.Require(left, str(op), right, self._at(meta))

    def tensor(self, meta, children):
        flags = [child for child in children[1:] if isinstance(child, str) and child in ("padded", "local")]
        shape = [child for child in children[1:] if not (isinstance(child, str) and child in ("padded", "local"))]
        return ast.TensorDecl(str(children[0]), tuple(shape), "padded" in flags, _position(children[0]),
                              "local" in flags)

    def padded(self, meta, children):
        return "padded"

    def local(self, meta, children):
        return "local"

    # compute
    def dim_index(self, meta, children):
        return ast.DimIndex(str(children[0]), self._at(meta), children[1])

    def slice(self, meta, children):
        return ast.Slice(str(children[0]), tuple(children[1:]), self._at(meta))

    def argument(self, meta, children):
        return ast.Argument(str(children[0]), children[1], _position(children[0]))

    def accumulate(self, meta, children):
        return ast.Argument(str(children[0]), children[1], _position(children[0]), accumulate=True)

    def float_literal(self, meta, children):
        text = "".join(str(child) for child in children)
        return ast.FloatLiteral(float(text), self._at(meta))

    def call(self, meta, children):
        label, primitive, *rest = children
        arguments = tuple(child for child in rest if child is not None)
        return ast.Call(str(primitive), arguments, self._at(meta), None if label is None else str(label))

    def for_loop(self, meta, children):
        var, start, stop, *body = children
        return ast.ForLoop(str(var), start, stop, tuple(body), self._at(meta))

    def compute(self, meta, children):
        return tuple(children)

    # schedule
    def target(self, meta, children):
        return ast.Target(tuple(str(part) for part in children), self._at(meta))

    def int_set(self, meta, children):
        return tuple(ast.Number(int(child), _position(child)) if isinstance(child, Token) else child
                     for child in children)

    def split(self, meta, children):
        return ast.Split(children[0], children[1], self._at(meta))

    def reorder_any(self, meta, children):
        return ast.Reorder(None, self._at(meta), None, children[0] or ())

    def reorder_named(self, meta, children):
        return ast.Reorder(None, self._at(meta), str(children[0]), children[1] or ())

    def pins(self, meta, children):
        return tuple(children)

    def pin(self, meta, children):
        return children[0], str(children[1])

    def reorder(self, meta, children):
        return ast.Reorder(tuple(children), self._at(meta))

    def fuse(self, meta, children):
        return ast.Fuse(children[0], children[1], True, self._at(meta))

    def fuse_loops(self, meta, children):
        return ast.Fuse(children[0], children[1], False, self._at(meta))

    def layout_choice(self, meta, children):
        return tuple(str(child) for child in children)

    def layout(self, meta, children):
        return ast.Layout(str(children[0]), tuple(children[1:]), self._at(meta))

    def layout_fixed(self, meta, children):
        return ast.Layout(str(children[0]), (children[1],), self._at(meta))

    def vectorize(self, meta, children):
        return ast.Vectorize(str(children[0]), tuple(str(c) for c in children[1:]), self._at(meta))

    vectorize_fixed = vectorize

    def schedule(self, meta, children):
        return tuple(children)

    def operator(self, meta, children):
        name, *rest = children
        params = tuple(child for child in rest if isinstance(child, ast.Param))
        lets = tuple(child for child in rest if isinstance(child, ast.Let))
        tensors = tuple(child for child in rest if isinstance(child, ast.TensorDecl))
        blocks = [child for child in rest if isinstance(child, tuple)]
        compute = blocks[0]
        schedule = blocks[1] if len(blocks) > 1 else ()
        requires = tuple(child for child in rest if isinstance(child, ast.Require))
        return ast.Operator(str(name), params, lets, tensors, compute, schedule, _position(name), requires)

    def start(self, meta, children):
        return children[0]
