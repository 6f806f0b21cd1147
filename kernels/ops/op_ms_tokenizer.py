"""com.microsoft Tokenizer: each string of a [C] or [N, C] tensor broken into tokens along a new
last axis, padded with `pad_value` to the longest; what sklearn-onnx's text vectorizers emit.

With `tokenexp` (RE2, as RegexFullMatch reads it: kernels/ops/_re2.py) the tokens are the
successive leftmost non-overlapping matches; with separators [""] (or tokenexp ".") every
character is a token; with other `separators` (RE2 each) the pieces between matches of any
separator are the tokens. Tokens shorter than `mincharnum` characters are dropped; `mark` puts
"\\x02" before and "\\x03" after each string's tokens, the padding outside them.
"""
import numpy as np

from rtd.errors import Code

from ._contrib import MS_DOMAIN
from ._re2 import compile_re2
from ._strings import StringKernel
from .base import REQUIRED


class Tokenizer_1(StringKernel):
    domain = MS_DOMAIN
    attributes = {"mark": REQUIRED, "pad_value": REQUIRED, "mincharnum": REQUIRED, "separators": None, "tokenexp": None}

    def setup(self):
        if (self.separators is None) == (self.tokenexp is None):
            self.refuse("exactly one of separators and tokenexp must be set")
        if self.mincharnum < 1:
            self.refuse(f"mincharnum {self.mincharnum} must be at least 1")
        self.characters = self.tokenexp == "." or list(self.separators or []) == [""]
        if self.characters:
            return
        if self.tokenexp is not None:
            self.regex = compile_re2(f"(?:{self.tokenexp})", self.op_type)
        else:
            if "" in self.separators:
                self.refuse("an empty separator among others", Code.E_OP_UNSUPPORTED)
            self.regex = compile_re2("|".join(f"(?:{s})" for s in self.separators), self.op_type)

    def _tokens(self, text: str) -> list:
        if self.characters:
            tokens = list(text)
        elif self.tokenexp is not None:
            tokens = self.regex.findall(text) if self.regex.groups == 0 else [m.group(0) for m in self.regex.finditer(text)]
        else:
            tokens = self.regex.split(text) if self.regex.groups == 0 else self._split(text)
        return list(filter(None, tokens)) if self.mincharnum == 1 else [t for t in tokens if len(t) >= self.mincharnum]

    def _split(self, text: str) -> list:
        pieces, at = [], 0
        for m in self.regex.finditer(text):
            pieces.append(text[at:m.start()])
            at = m.end()
        return pieces + [text[at:]]

    def compute(self, x):
        if x.ndim not in (1, 2):
            self.refuse(f"input must be [C] or [N, C], got shape {list(x.shape)}", Code.E_INPUT_INVALID)
        flat = self.texts(x).reshape(-1)
        tokens = list(map(self._tokens, flat))
        if self.mark:
            tokens = [["\x02", *t, "\x03"] for t in tokens]
        counts = np.fromiter(map(len, tokens), np.int64, len(tokens))
        width = int(counts.max(initial=0))
        y = np.full((len(tokens), width), self.pad_value, dtype=object)
        y[np.arange(width) < counts[:, None]] = [t for row in tokens for t in row]
        return (y.reshape(*x.shape, width),)
