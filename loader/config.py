"""config.pbtxt: Triton's model configuration in protobuf text format, parsed strictly.

google.protobuf.text_format refuses unknown fields and malformed text; any such refusal
becomes E_CONFIG_INVALID. The text must be UTF-8 and within the config size cap.
"""
from google.protobuf import text_format

from rtd.errors import Code, RtdError
from rtd.loader import layout
from rtd.proto.model_config_pb2 import ModelConfig

MAX_BYTES = layout.SMALL_CAPS[layout.CONFIG][0]


def decode(data) -> str:
    if len(data) > MAX_BYTES:
        raise RtdError(Code.E_CONFIG_INVALID, f"config.pbtxt is over {MAX_BYTES} bytes")
    try:
        return bytes(data).decode("utf-8", "strict")
    except UnicodeDecodeError:
        raise RtdError(Code.E_CONFIG_INVALID, "config.pbtxt is not UTF-8") from None


def parse_config(text: str) -> ModelConfig:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise RtdError(Code.E_CONFIG_INVALID, f"config.pbtxt is over {MAX_BYTES} bytes")
    config = ModelConfig()
    try:
        text_format.Parse(text, config, allow_unknown_extension=False, allow_unknown_field=False)
    except (text_format.ParseError, UnicodeError, ValueError, SystemError) as e:
        # ValueError: an enum number out of range; SystemError: upb on a lone surrogate
        raise RtdError(Code.E_CONFIG_INVALID, f"{type(e).__name__}: {e}") from None
    return config
