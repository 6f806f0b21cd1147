"""RE2 patterns (RegexFullMatch's syntax) rewritten for Python's `re`, or refused.

Where the two agree on syntax they can still differ in meaning; the rewrite removes those
differences: RE2's \\d \\w \\s \\b are ASCII (re's are Unicode) and become explicit classes;
RE2's $ is the end of the text (re's also matches before a final newline) and becomes \\Z; RE2's
\\z, \\x{...}, \\Q...\\E, (?<name>...) and [[:alpha:]] are spelled the re way; a mid-pattern flag
group (?i) becomes a scoped (?i:...) to the end of its group, reopened after each |; `{` not
starting a repetition, and `{,n}`, are literal braces as in RE2. What RE2 rejects and re would
run (look-around, back-references, atomic groups, possessive repeats, \\Z, repeats above 1000)
is E_MODEL_INVALID; what RE2 accepts and this rewrite does not carry (\\p{...} Unicode classes,
\\C, negated Perl classes inside a class, (?U), (?m) past the start) is E_OP_UNSUPPORTED.

Python's re backtracks where RE2 runs in linear time: a pattern with nested repeats can take
exponential time on a hostile input; the request deadline bounds it, not this module.
"""
import re

from rtd.errors import Code, RtdError

_WORD = "0-9A-Za-z_"
_SPACE = "\\t\\n\\f\\r "
_PERL = {"d": "0-9", "w": _WORD, "s": _SPACE}
_POSIX = {"alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ", "cntrl": "\\x00-\\x1f\\x7f",
          "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
          "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": _WORD, "xdigit": "0-9A-Fa-f"}
_BOUNDARY = f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))"
_NOT_BOUNDARY = f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))"
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_MAX_REPEAT = 1000


def _invalid(pattern: str, why: str):
    return RtdError(Code.E_MODEL_INVALID, f"RegexFullMatch: pattern {pattern[:60]!r} is not RE2: {why}")


def _unsupported(pattern: str, why: str):
    return RtdError(Code.E_OP_UNSUPPORTED, f"RegexFullMatch: pattern {pattern[:60]!r}: {why}")


class _Rewrite:
    def __init__(self, pattern: str):
        self.p, self.out, self.i = pattern, [], 0
        self.frames = [[]]      # per open group: the flags of mid-pattern (?flags) scopes opened in it
        self.multiline = False

    def run(self) -> str:
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "\\":
                self.escape(in_class=False)
            elif c == "[":
                self.char_class()
            elif c == "(":
                self.group()
            elif c == ")":
                if len(self.frames) == 1:
                    raise _invalid(p, "unbalanced )")
                self.out.append(")" * len(self.frames.pop()) + ")")
                self.i += 1
            elif c == "|":
                scopes = self.frames[-1]
                self.out.append(")" * len(scopes) + "|" + "".join(f"(?{f}:" for f in scopes))
                self.i += 1
            elif c == "$":
                self.out.append("$" if self.multiline else "\\Z")
                self.i += 1
            elif c == "{":
                self.brace()
            elif c in "*+?":
                if p[self.i + 1:self.i + 2] in ("*", "+") and p[self.i + 1:self.i + 2]:
                    raise _invalid(p, f"repetition {p[self.i:self.i + 2]!r}")
                self.out.append(c + ("?" if p[self.i + 1:self.i + 2] == "?" else ""))
                self.i += 1 + (p[self.i + 1:self.i + 2] == "?")
            else:
                self.out.append(c)
                self.i += 1
        if len(self.frames) != 1:
            raise _invalid(p, "unbalanced (")
        return "".join(self.out) + ")" * len(self.frames[0])

    def escape(self, in_class: bool):
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise _invalid(p, "trailing backslash")
        e = p[i + 1]
        self.i += 2
        if e == "Q":
            end = p.find("\\E", self.i)
            literal = p[self.i:] if end < 0 else p[self.i:end]
            self.i = len(p) if end < 0 else end + 2
            self.out.append("".join("\\" + ch if not ch.isalnum() else ch for ch in literal))
        elif e in "dws":
            self.out.append(_PERL[e] if in_class else f"[{_PERL[e]}]")
        elif e in "DWS":
            if in_class:
                raise _unsupported(p, f"\\{e} inside a class")
            self.out.append(f"[^{_PERL[e.lower()]}]")
        elif e in "bB" and not in_class:
            self.out.append(_BOUNDARY if e == "b" else _NOT_BOUNDARY)
        elif e == "z" and not in_class:
            self.out.append("\\Z")
        elif e == "x" and p[self.i:self.i + 1] == "{":
            end = p.find("}", self.i)
            try:
                code = int(p[self.i + 1:end], 16) if end > 0 else -1
                self.out.append(re.escape(chr(code)))
            except ValueError:
                raise _invalid(p, "bad \\x{...}") from None
            self.i = end + 1
        elif e in "pPC":
            raise _unsupported(p, f"\\{e} (Unicode classes, single bytes) is not carried to Python's re")
        elif e in "123456789ZNuUgkKGXRhHLlEe":
            raise _invalid(p, f"\\{e} (back-references and Python or Perl escapes)")
        else:
            self.out.append("\\" + e)

    def char_class(self):
        p = self.p
        self.out.append("[")
        self.i += 1
        if p[self.i:self.i + 1] == "^":
            self.out.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(p):
                raise _invalid(p, "missing ]")
            c = p[self.i]
            if c == "]" and not first:
                self.out.append("]")
                self.i += 1
                return
            first = False
            if c == "\\":
                self.escape(in_class=True)
            elif p.startswith("[:", self.i):
                end = p.find(":]", self.i + 2)
                name = p[self.i + 2:end] if end > 0 else ""
                if name.startswith("^"):
                    raise _unsupported(p, f"negated class [:{name}:]")
                if name not in _POSIX:
                    raise _invalid(p, f"class [:{name}:]")
                self.out.append(_POSIX[name])
                self.i = end + 2
            else:
                self.out.append("\\" + c if c in "[]&~|" else c)   # re reads [ && ~~ || as future set syntax
                self.i += 1

    def group(self):
        p, i = self.p, self.i
        if not p.startswith("(?", i):
            self.frames.append([])
            self.out.append("(")
            self.i += 1
            return
        rest = p[i + 2:]
        if rest.startswith("P<") or rest.startswith(":"):
            self.frames.append([])
            self.out.append(p[i:i + 3] if rest.startswith(":") else "(?P<")
            self.i += 3 if rest.startswith(":") else 4
            return
        if rest.startswith("<") and not rest.startswith(("<=", "<!")):
            self.frames.append([])
            self.out.append("(?P<")
            self.i += 3
            return
        m = _FLAGS.match(p, i)
        if m is None:
            raise _invalid(p, f"group {p[i:i + 4]!r} (look-around, atomic groups, conditionals, comments)")
        on, off, end = m.group(1), m.group(2) or "", m.group(3)
        for flag in on + off:
            if flag == "U":
                raise _unsupported(p, "the ungreedy flag (?U)")
            if flag not in "ims":
                raise _invalid(p, f"flag {flag!r}")
        self.i = m.end()
        if end == ":":
            if "m" in on + off:
                raise _unsupported(p, "(?m:...) scoped multi-line mode")
            self.frames.append([])
            self.out.append(m.group(0))
        elif i == 0:   # leading flags hold for the whole pattern, in both
            self.multiline = "m" in on
            self.out.append(f"(?{on})" if on else "")
        else:
            if "m" in on + off:
                raise _unsupported(p, "(?m) past the start of the pattern")
            flags = on + (f"-{off}" if off else "")
            self.frames[-1].append(flags)
            self.out.append(f"(?{flags}:")

    def brace(self):
        m = _REPEAT.match(self.p, self.i)
        if m is None:
            self.out.append("\\{")
            self.i += 1
            return
        low, high = int(m.group(1)), m.group(3)
        if low > _MAX_REPEAT or (high and int(high) > _MAX_REPEAT) or (high and int(high) < low):
            raise _invalid(self.p, f"repetition {m.group(0)}")
        self.i = m.end()
        lazy = self.p[self.i:self.i + 1] == "?"
        if self.p[self.i:self.i + 1] in ("+", "*"):
            raise _invalid(self.p, f"repetition {m.group(0)}{self.p[self.i]}")
        self.out.append(m.group(0) + ("?" if lazy else ""))
        self.i += lazy


def compile_re2(pattern: str) -> re.Pattern:
    """`pattern` (RE2 syntax) as a compiled Python regex of the same meaning, or a refusal."""
    translated = _Rewrite(pattern).run()
    try:
        return re.compile(translated)
    except re.error as e:
        raise _invalid(pattern, str(e)) from None
