"""config.pbtxt: Triton's model configuration in protobuf text format, parsed strictly.

google.protobuf.text_format refuses unknown fields and malformed text; any such refusal
becomes E_CONFIG_INVALID. The text must be UTF-8 and within the config size cap.

A config is read before anything vouches for it (the model repository reads one to choose a
version), so a refusal never carries its text: protobuf's messages quote the offending line
and token, and a config that is a link to another file would hand that file's first word to
whoever asked. The refusal says where (line and column) and what the grammar expected there,
in words of this module's own, never what was found.
"""
import re

from google.protobuf import text_format

from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.proto.model_config_pb2 import ModelConfig

MAX_BYTES = layout.SMALL_CAPS[layout.CONFIG][0]
_WHERE = re.compile(r"(\d+):(\d+) :")
_PUNCTUATION = re.compile(r'Expected "([{}<>\[\]:,;])"')
_EXPECTED = (   # what protobuf's message says -> what the refusal says was expected
    ("has no field named", "a field of ModelConfig"),
    ("should not have multiple", "each singular field at most once"),
    ("Expected string", "a quoted string"),
    ("Couldn't parse integer", "an integer"),
    ("Value out of range", "an integer within the field's range"),
    ("Couldn't parse float", "a number"),
    ("Couldn't parse double", "a number"),
    ("has no value named", "a value of the field's enum"),
    ("Expected identifier", "a field name"),
    ("xtension", "no extensions"),
)


def decode(data, what: str = layout.CONFIG) -> str:
    if len(data) > MAX_BYTES:
        raise RtdError(Code.E_CONFIG_INVALID, f"{what} is over {MAX_BYTES} bytes")
    try:
        return bytes(data).decode("utf-8", "strict")
    except UnicodeDecodeError as e:
        raise RtdError(Code.E_CONFIG_INVALID, f"{what} is not UTF-8 (at byte {e.start})") from None


def _expected(message: str) -> str:
    punctuation = _PUNCTUATION.search(message)
    if punctuation:
        return f'"{punctuation.group(1)}"'
    return next((said for found, said in _EXPECTED if found in message), "protobuf text of a ModelConfig")


def refusal(error: Exception, what: str = layout.CONFIG) -> RtdError:
    """E_CONFIG_INVALID for a parser's error: where, and what was expected; nothing of the text."""
    message = str(error)
    where = _WHERE.match(message)
    at = f" line {where.group(1)} column {where.group(2)}" if where else ""
    if isinstance(error, ValueError) and not isinstance(error, text_format.ParseError):
        return RtdError(Code.E_CONFIG_INVALID, f"{what}{at}: expected a value the field's type can hold")
    if isinstance(error, (UnicodeError, SystemError)):
        return RtdError(Code.E_CONFIG_INVALID, f"{what}{at}: expected text without lone surrogates")
    return RtdError(Code.E_CONFIG_INVALID, f"{what}{at}: expected {_expected(message)}")


def parse_config(text: str, what: str = layout.CONFIG) -> ModelConfig:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise RtdError(Code.E_CONFIG_INVALID, f"{what} is over {MAX_BYTES} bytes")
    config = ModelConfig()
    try:
        text_format.Parse(text, config, allow_unknown_extension=False, allow_unknown_field=False)
    except (text_format.ParseError, UnicodeError, ValueError, SystemError) as e:
        # ValueError: an enum number out of range; SystemError: upb on a lone surrogate
        raise refusal(e, what) from None
    return config
