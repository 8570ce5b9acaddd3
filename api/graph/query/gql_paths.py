"""Path patterns of a MATCH read from sqlglot's tokens: the syntax GQL blocks and openCypher queries share."""

from __future__ import annotations

import abc
import re
from typing import Any

import attrs
from sqlglot.tokens import TokenType

_NAME = re.compile(r"[A-Za-z_$][A-Za-z_0-9]*")
_HOPS = re.compile(r"(\d+)?(\.\.(\d+)?)?")
_OPEN = (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE)
_CLOSE = (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE)


@attrs.frozen
class Element:
    """A node ``(v:L {k: x} WHERE c)`` or an edge ``-[e:L*1..3 {k: x} WHERE c]->`` of a path:
    its tokens, and its property values and WHERE as ``(start, end)`` ranges of token indices."""

    kind: str  # "node" or "edge"
    token: Any  # the first token
    var: Any | None = None  # the variable's token
    labels: tuple = ()  # the label tokens
    any_label: bool = False  # joined by ``|`` (one of them), else by ``:`` (every one)
    properties: tuple = ()  # ((key token, (start, end)), ...)
    where: tuple | None = None  # (start, end)
    direction: str = "out"  # edges: "out", "in" or "both"
    hops: tuple | None = None  # edges: (low, high) of ``*low..high`` or ``{low,high}``
    star: bool = False  # the hops are written ``*...``
    closed: bool = True  # edges: a ``-``/``->`` after the brackets (GQL allows ``(a)-(b)``)
    hops_token: Any = None


class PathReader(abc.ABC):
    """A cursor over the tokens of ``text`` that reads path patterns; ``fail`` (each reader's
    own) makes the error."""

    max_hops = 10  # the upper bound of ``*``, ``*2..`` and ``{2,}``

    def __init__(self, text: str, toks: list) -> None:
        self.text, self.toks, self.at = text, toks, 0

    def peek(self, ahead: int = 0):
        i = self.at + ahead
        return self.toks[i] if 0 <= i < len(self.toks) else None

    def kind(self, ahead: int = 0) -> TokenType | None:
        token = self.peek(ahead)
        return None if token is None else token.token_type

    def word(self, ahead: int = 0) -> str:
        token = self.peek(ahead)
        return token.text.lower() if token is not None else ""

    def take(self):
        token = self.toks[self.at]
        self.at += 1
        return token

    def position(self, token) -> tuple[int, int]:
        """(line, column) where ``token`` starts (sqlglot's column is that of its last character)."""
        if token is None:
            start = len(self.text.rstrip())
            start = len(self.text) if start == len(self.text) else start
        else:
            start = token.start
        return self.text.count("\n", 0, start) + 1, start - self.text.rfind("\n", 0, start)

    @abc.abstractmethod
    def fail(self, what: str, token=None) -> Exception:
        """The error to raise when ``what`` was expected at ``token`` (None: the current one)."""

    def expect(self, text: str, what: str | None = None):
        token = self.peek()
        if token is None or token.text.lower() != text:
            raise self.fail(what or repr(text), token)
        return self.take()

    def is_name(self, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and (token.token_type == TokenType.IDENTIFIER
                                      or _NAME.fullmatch(token.text) is not None)

    def span(self, stops: tuple = ()) -> tuple[int, int]:
        """The token range up to a token of type ``stops`` at depth 0 or the close of the
        enclosing bracket."""
        depth, start = 0, self.at
        while self.at < len(self.toks):
            kind = self.toks[self.at].token_type
            if depth == 0 and (kind in stops or kind in _CLOSE):
                break
            depth += 1 if kind in _OPEN else -1 if kind in _CLOSE else 0
            self.at += 1
        return start, self.at

    def path(self) -> list[Element]:
        """``node (edge node)*``."""
        path = [self.node()]
        while True:
            edge = self.edge()
            if edge is None:
                return path
            path.extend([edge, self.node()])

    def node(self) -> Element:
        first = self.expect("(", "'(' of a node pattern")
        element = self._inside("node", first, TokenType.R_PAREN)
        self.expect(")", "')'")
        return element

    def edge(self) -> Element | None:
        """An edge after a node: ``-[...]->``, ``<-[...]-``, ``-[...]-``, ``-->``, ``<--``, ``--``,
        and GQL's ``->``, ``<-``, ``-``; then GQL's ``{low,high}``."""
        first = self.peek()
        kind = self.kind()
        incoming = False
        if kind == TokenType.LT and self.kind(1) == TokenType.DASH:
            incoming = True
            self.at += 2
        elif kind == TokenType.DASH:
            self.at += 1
        elif kind == TokenType.ARROW:
            self.at += 1
            return Element("edge", first)
        else:
            return None
        element = Element("edge", first)
        if self.kind() == TokenType.L_BRACKET:
            self.take()
            element = self._inside("edge", first, TokenType.R_BRACKET)
            self.expect("]", "']'")
        direction, closed = "in" if incoming else "both", True
        if self.kind() == TokenType.ARROW:
            self.take()
            direction = "both" if incoming else "out"
        elif self.kind() == TokenType.DASH:
            self.take()
        elif self.kind() == TokenType.GT:
            self.take()
            direction = "out"
        else:
            closed = False
        hops, hops_token = element.hops, element.hops_token
        if self.kind() == TokenType.L_BRACE:  # GQL's quantifier {low,high}
            hops_token = self.take()
            low = high = self._number()
            if self.kind() == TokenType.COMMA:
                self.take()
                high = self._number() if self.kind() != TokenType.R_BRACE else max(self.max_hops, low)
            self.expect("}", "'}'")
            hops = (low, high)
        return attrs.evolve(element, direction=direction, closed=closed, hops=hops,
                            hops_token=hops_token)

    def _number(self) -> int:
        if self.kind() != TokenType.NUMBER or not self.peek().text.isdigit():
            raise self.fail("a number of hops")
        return int(self.take().text)

    def _inside(self, kind: str, first, close: TokenType) -> Element:
        var = None
        if self.kind() not in (close, TokenType.COLON, TokenType.L_BRACE, TokenType.STAR) and \
                self.word() != "where" and self.is_name():
            var = self.take()
        labels, any_label = [], False
        if self.kind() == TokenType.COLON:
            self.take()
            labels.append(self._label(kind))
            while self.kind() in (TokenType.PIPE, TokenType.COLON):
                if self.take().token_type == TokenType.PIPE:
                    any_label = True
                if self.kind() == TokenType.COLON:  # ``:A|:B``
                    self.take()
                labels.append(self._label(kind))
        hops, star, hops_token = None, False, None
        if self.kind() == TokenType.STAR:
            hops_token, star = self.take(), True
            hops = self._hops(hops_token)
        properties = []
        if self.kind() == TokenType.L_BRACE:
            self.take()  # a property map {key: value, ...}: equalities
            while self.kind() not in (TokenType.R_BRACE, None):
                if not self.is_name():
                    raise self.fail("a property name")
                key = self.take()
                self.expect(":", "':'")
                properties.append((key, self.span((TokenType.COMMA,))))
                if self.kind() != TokenType.COMMA:
                    break
                self.take()
            self.expect("}", "'}'")
        where = None
        if self.word() == "where":
            self.take()
            where = self.span()
        return Element(kind, first, var, tuple(labels), any_label, tuple(properties), where,
                       hops=hops, star=star, hops_token=hops_token)

    def _label(self, kind: str):
        if not self.is_name():
            raise self.fail("a label" if kind == "node" else "a relationship type")
        return self.take()

    def _hops(self, star) -> tuple[int, int]:
        """``*``, ``*n``, ``*low..``, ``*..high``, ``*low..high`` (1..max_hops when left out)."""
        words = []
        while self.kind() in (TokenType.NUMBER, TokenType.DOT):
            words.append(self.take().text)
        found = _HOPS.fullmatch("".join(words))
        if found is None:
            raise self.fail("a hop range (*, *n, *low..high)", star)
        low, dots, high = found.group(1), found.group(2), found.group(3)
        if not dots:
            return (int(low), int(low)) if low else (1, self.max_hops)
        low_value = int(low) if low else 1
        return low_value, int(high) if high else max(self.max_hops, low_value)
