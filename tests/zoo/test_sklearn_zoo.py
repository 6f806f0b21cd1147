"""The scikit-learn zoo compiled by rtd against onnxruntime, on fresh random inputs (seed
printed on failure; RTD_ZOO_SEED replays one). ZipMap outputs are compared as the
[N, classes] tensor rtd serves, columns in the ZipMap's label order."""
import os

import numpy as np
import onnx
import pytest

from rtd.kernels import compile_model
from rtd.loader import pack

from .compare import FLOAT_TOLERANCE, mismatches, reference_session
from .sklearn_models import SKLEARN_ZOO, zipmap_as_tensor, zipmap_labels


def _seed() -> int:
    return int(os.environ.get("RTD_ZOO_SEED") or np.random.SeedSequence().entropy)


def _labels_agree_but_for_ties(got: dict, want: dict, where: str) -> None:
    """Compare (and remove) the label outputs: a row may name another class only where the
    reference's probabilities of the two are equal within the float tolerance (a tie that
    summation order breaks either way)."""
    probabilities = next((v for n, v in want.items() if "probab" in n and v.ndim == 2), None)
    for name in [n for n in want if "label" in n]:
        ours, theirs = np.asarray(got.pop(name)), np.asarray(want.pop(name))
        differ = np.flatnonzero(ours.reshape(-1) != theirs.reshape(-1))
        if len(differ) and probabilities is not None and ours.dtype != object:
            classes = np.unique(np.concatenate([ours.reshape(-1), theirs.reshape(-1)]))
            column = {c: i for i, c in enumerate(sorted(classes))}
            ties = [abs(probabilities[i, column[ours.reshape(-1)[i]]] - probabilities[i, column[theirs.reshape(-1)[i]]]) <= 1e-5
                    for i in differ] if len(classes) == probabilities.shape[1] else [False]
            differ = differ[~np.array(ties)]
        assert not len(differ), f"{where}: labels differ at rows {differ.tolist()[:5]}"


@pytest.mark.parametrize("name", list(SKLEARN_ZOO))
def test_matches_onnxruntime(name):
    zoo = SKLEARN_ZOO[name]
    proto = onnx.load(zoo.path())
    model = compile_model(proto)
    reference = reference_session(zoo.path(), threads=1, optimized=False)
    seed = _seed()
    rng = np.random.default_rng(seed)
    for batch in (37, 1, 5):
        feeds = zoo.feeds(rng, batch)
        want = {}
        for out, value in zip(reference.get_outputs(), reference.run(None, feeds)):
            labels = zipmap_labels(proto, out.name)
            want[out.name] = value if labels is None else zipmap_as_tensor(value, labels)
        got = model.run(feeds)
        _labels_agree_but_for_ties(got, want, f"{name} at batch {batch} (RTD_ZOO_SEED={seed})")
        problems = mismatches(got, want, FLOAT_TOLERANCE)
        assert not problems, f"{name} at batch {batch} (RTD_ZOO_SEED={seed}): " + "; ".join(problems)


@pytest.mark.parametrize("name", [n for n in SKLEARN_ZOO if "regressor" not in n and n != "svr"])
def test_zipmap_output_is_declared_as_the_probability_tensor(name):
    proto = onnx.load(SKLEARN_ZOO[name].path())
    model = compile_model(proto)
    spec = next(s for s in model.outputs if zipmap_labels(proto, s.name) is not None)
    assert spec.dtype == np.float32 and spec.shape == (None, len(zipmap_labels(proto, spec.name)))


def test_the_packer_records_zipmap_labels_in_the_signed_metadata():
    with open(SKLEARN_ZOO["pipeline"].path(), "rb") as f:
        data = f.read()
    meta = pack.build_metadata(data, name="pipeline", version="1.0.0", counter=1)
    labels = zipmap_labels(onnx.load_from_string(data), "output_probability")
    assert meta["class_labels"] == {"output_probability": labels} and sorted(labels) == ["high", "low", "mid"]
    probability = next(o for o in meta["outputs"] if o["name"] == "output_probability")
    assert probability == {"name": "output_probability", "dtype": "FLOAT", "shape": [None, 3]}
    with open(SKLEARN_ZOO["forest_regressor"].path(), "rb") as f:
        assert "class_labels" not in pack.build_metadata(f.read(), name="r", version="1.0.0", counter=1)
