"""RE2 patterns (RegexFullMatch's syntax, and the Tokenizer's) compiled by RE2 itself (google-re2), as
onnxruntime compiles them: the same patterns accepted and refused, the same meaning, and matching
in time linear in the text whatever the pattern, so a model's pattern cannot make its worker
backtrack for ever. A pattern RE2 refuses is E_MODEL_INVALID.
"""
import re2

from rtd.errors import Code, RtdError


def compile_re2(pattern: str, op: str):
    options = re2.Options()
    options.log_errors = False   # RE2 would also print each refusal on stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise RtdError(Code.E_MODEL_INVALID, f"{op}: pattern {pattern[:60]!r} is not RE2: {why}") from None
