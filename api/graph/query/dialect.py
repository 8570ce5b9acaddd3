"""GeaFlow's SQL as sqlglot reads it: the tokens a script's statements and a graph query's
expressions are read from."""

from __future__ import annotations

from sqlglot import tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType


class GeaFlowDialect(Dialect):
    """GeaFlow's SQL as sqlglot reads it: ``'...'`` and ``"..."`` are strings, `` `...` `` names."""

    class Tokenizer(tokens.Tokenizer):
        QUOTES = ["'", '"']
        IDENTIFIERS = ["`"]
        STRING_ESCAPES = ["\\", "'"]
        # CALL starts a graph algorithm's call, not a command whose rest is one string
        KEYWORDS = {**tokens.Tokenizer.KEYWORDS, "CALL": TokenType.VAR}
