"""Strict parsing of the small documents: manifest, metadata.json, signature envelope, config."""
import hashlib
import json

import pytest

from rtd.errors import Code, RtdError
from rtd.loader import config, manifest, metadata, signing

DIGEST = hashlib.sha256(b"x").hexdigest()
GOOD = f"{DIGEST}  metadata.json\n{DIGEST}  model.onnx\n".encode()


def _refused(code, fn, *args):
    with pytest.raises(RtdError) as e:
        fn(*args)
    assert e.value.code is code, str(e.value)


def test_manifest_accepts_exactly_sha256sum_text_mode():
    assert manifest.parse(GOOD) == {"metadata.json": DIGEST, "model.onnx": DIGEST}
    assert manifest.render(manifest.parse(GOOD)) == GOOD


@pytest.mark.parametrize("text", [
    GOOD.replace(b"\n", b"\r\n"),                       # CRLF
    GOOD.replace(b"  model", b" *model"),               # binary-mode marker
    GOOD[:-1],                                           # no final newline
    GOOD + b"\n",                                        # blank line
    b"# comment\n" + GOOD,
    GOOD.replace(DIGEST.encode(), DIGEST.upper().encode(), 1),
    b"\n".join(reversed(GOOD.strip().split(b"\n"))) + b"\n",   # unsorted
    GOOD + f"{DIGEST}  model.onnx\n".encode(),           # duplicate
    GOOD + f"{DIGEST}  checksum.sha256\n".encode(),      # lists itself
    f"{DIGEST}  model.onnx\n".encode(),                  # no metadata.json
    b"",
])
def test_manifest_refusals(text):
    _refused(Code.E_MANIFEST_INVALID, manifest.parse, text)


def _meta(**changes):
    meta = {"format": metadata.FORMAT, "name": "m", "version": "1.0.0", "counter": 1,
            "created": "2026-01-01T00:00:00Z", "inputs": [], "outputs": [], "config_sha256": None}
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not ...}


def test_metadata_schema():
    assert metadata.parse(metadata.render(_meta(expires="2027-01-01T00:00:00Z")))["expires"]
    for bad in (_meta(version="1.0"), _meta(version="01.0.0"), _meta(counter=0), _meta(counter=True),
                _meta(counter=1.0), _meta(created="2026-01-01 00:00:00"), _meta(created="2026-02-30T00:00:00Z"),
                _meta(expires="2025-01-01T00:00:00Z"), _meta(name="../x"), _meta(format="other"),
                _meta(config_sha256="ABC"), _meta(inputs=[{"name": "x"}]), _meta(counter=...),
                _meta(min_rtd_version="latest")):
        _refused(Code.E_METADATA_INVALID, metadata.parse, json.dumps(bad).encode())


def test_semver_precedence():
    assert metadata.semver_key("1.0.0-rc.1") < metadata.semver_key("1.0.0") < metadata.semver_key("1.10.0")


def test_signature_envelope_strictness(signer):
    envelope = signing.sign(signer, GOOD)
    assert signing.read_envelope(envelope).manifest_sha256 == hashlib.sha256(GOOD).hexdigest()
    parsed = json.loads(envelope)
    _refused(Code.E_SIG_INVALID, signing.read_envelope, json.dumps({**parsed, "extra": 1}).encode())
    _refused(Code.E_ALG_UNSUPPORTED, signing.read_envelope,
             signing.boundedjson.dumps({**parsed, "alg": "rsa-pss-sha512"}))
    _refused(Code.E_SIG_MISSING, signing.read_envelope, b"")


def test_signing_refuses_short_keys():
    from cryptography.hazmat.primitives.asymmetric import rsa
    short = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _refused(Code.E_ALG_UNSUPPORTED, signing.sign, short, GOOD)


def test_config_is_strict_text_format():
    assert config.parse_config('name: "m"\nmax_batch_size: 2\n').max_batch_size == 2
    for bad in ('name: "m"\nunknown_field: 1\n', 'name: "m"\nmax_batch_size: "two"\n', "name: {"):
        _refused(Code.E_CONFIG_INVALID, config.parse_config, bad)
    _refused(Code.E_CONFIG_INVALID, config.decode, b"name: \"\xff\"")


def test_metadata_class_labels_name_outputs_and_hold_short_labels():
    outputs = [{"name": "probabilities", "dtype": "FLOAT", "shape": [None, 2]}]
    good = _meta(outputs=outputs, class_labels={"probabilities": ["cat", "dog"]})
    assert metadata.parse(metadata.render(good))["class_labels"] == {"probabilities": ["cat", "dog"]}
    assert metadata.parse(metadata.render(_meta(outputs=outputs, class_labels={"probabilities": [0, 7]})))
    for bad in ({"other": ["a"]}, {"probabilities": "ab"}, {"probabilities": [1.5]}, {"probabilities": ["x" * 257]},
                {"probabilities": [True]}, ["probabilities"]):
        _refused(Code.E_METADATA_INVALID, metadata.parse, json.dumps(_meta(outputs=outputs, class_labels=bad)).encode())
