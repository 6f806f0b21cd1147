"""config.pbtxt: loader/config.py decode + parse_config over random bytes, random text and
token-level mutations of valid Triton configs (fields dropped, doubled, swapped; hostile
tokens inserted: unknown fields, extension and Any syntax, out-of-range and odd numbers,
broken escapes, unbalanced braces and brackets, surrogates).

Property: a ModelConfig or RtdError(E_CONFIG_INVALID), nothing else, within a time bound
linear in the input's size (measured worst case about 3 s per MiB, all of it linear; the
bound here is far above it so a loaded host does not make it flaky).
"""
import functools
import re
import time

import pytest
from hypothesis import strategies as st

from rtd.errors import Code
from rtd.loader import config
from rtd.proto.model_config_pb2 import ModelConfig

from .harness import assert_refusal, assert_refused, note, run

VALID = [
    'name: "demo"\nmax_batch_size: 8\n',
    'name: "resnet"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
    'input [ { name: "input" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] } ]\n'
    'output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" } ]\n'
    'instance_group [ { count: 2 kind: KIND_CPU } ]\n'
    'dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 '
    'default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 max_queue_size: 16 } }\n',
    'backend: "onnxruntime"\nversion_policy: { specific: { versions: [1, 3] } }\n'
    'input { name: "x" data_type: TYPE_STRING dims: -1 reshape: { shape: [ ] } optional: true }\n'
    'parameters { key: "threads" value: { string_value: "2" } }\n'
    'parameters: [ { key: "a" value { string_value: "\\x41\\n\\u00e9" } } ]\n'
    '# a comment\ndefault_model_filename: \'model.onnx\'\n',
    'version_policy { latest { num_versions: 2 } } instance_group { count: 1 kind: KIND_GPU gpus: [0, 1] }',
]
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|#[^\n]*|[A-Za-z_][A-Za-z0-9_.]*|-?[0-9][0-9A-Za-z.+-]*|\S')
HOSTILE = ["{", "}", "[", "]", ":", ",", ";", "<", ">", "name", "input", "dims", "unknown_field", "[rtd.kserve.ModelConfig]",
           "[type.googleapis.com/rtd.kserve.ModelConfig]", "99999999999999999999", "-9223372036854775809", "0x7fffffffffffffff",
           "1e999", "-inf", "nan", "0777", "00", "1.5", "true", "TYPE_BF16", "KIND_WHAT", "42", '"\\x"', '"\\u12"', '"\\777"',
           '"\\ud800"', '"é"', "'", '"', "#", "\ud800", "\x00", "TYPE_FP32 TYPE_FP32"]


@st.composite
def mutated_configs(draw) -> str:
    tokens = TOKEN.findall(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 4]))):
        how = draw(st.sampled_from(["drop", "double", "swap", "insert", "insert"]))
        i = draw(st.integers(0, max(len(tokens) - 1, 0)))
        if how == "drop" and tokens:
            del tokens[i]
        elif how == "double" and tokens:
            tokens.insert(i, tokens[i])
        elif how == "swap" and len(tokens) > 1:
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        else:
            tokens.insert(i, draw(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=4))))
    return draw(st.sampled_from([" ", "\n", ""])).join(tokens) if draw(st.integers(0, 5)) else "".join(tokens)


inputs = st.one_of(mutated_configs(), mutated_configs(), st.text(max_size=64), st.binary(max_size=64),
                   mutated_configs().map(lambda t: t.encode("utf-8", "surrogatepass")))


def check_config(data) -> None:
    started = time.monotonic()
    try:
        text = config.decode(data) if isinstance(data, bytes) else data
        parsed = config.parse_config(text)
    except Exception as e:   # the property is about what may escape
        assert_refusal(e, Code.E_CONFIG_INVALID)
        note(e.code.name)
    else:
        assert isinstance(parsed, ModelConfig)
        note("parsed")
    elapsed = time.monotonic() - started
    assert elapsed < 2.0 + len(data) / 50_000, f"{len(data)} bytes took {elapsed:.2f} s"


@pytest.mark.filterwarnings("ignore:invalid octal escape:DeprecationWarning")   # protobuf's own, for "\\777"
def test_config_pbtxt_is_a_model_config_or_e_config_invalid():
    run(inputs, check_config, default=500)


def test_oversized_config_is_refused_before_parsing():
    text = "#" * (config.MAX_BYTES + 1)
    assert_refused("a config over the cap", lambda: config.parse_config(text), Code.E_CONFIG_INVALID)
    assert_refused("a config over the cap, as bytes", lambda: config.decode(text.encode()), Code.E_CONFIG_INVALID)


# -- regressions: bugs the fuzzer found ------------------------------------------------------------
def test_an_enum_number_out_of_range_is_e_config_invalid():
    """Was: loader/config.py `parse_config` caught ParseError and UnicodeError only; an enum
    given a number outside int32 (`instance_group { kind: 99999999999999999999 }`) made
    protobuf's text_format raise ValueError("Value out of range"), out of verify_package."""
    for text in ("instance_group { kind: 99999999999999999999 }", "input { data_type: 4294967296 }"):
        assert_refused(repr(text), functools.partial(config.parse_config, text), Code.E_CONFIG_INVALID)


def test_a_lone_surrogate_enum_name_is_e_config_invalid():
    """Was: loader/config.py `parse_config` passed a lone surrogate where an enum name goes
    (`input { format: \\ud800 }`) to protobuf, whose upb enum lookup raised SystemError
    (only for callers with str; verify_package's strict UTF-8 has no surrogates)."""
    assert_refused("a surrogate enum name", lambda: config.parse_config("input { format: \ud800 }"), Code.E_CONFIG_INVALID)
