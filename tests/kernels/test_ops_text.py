"""The string ops (StringNormalizer, StringSplit, StringConcat, RegexFullMatch, TfIdfVectorizer)
beyond the backend cases, against onnxruntime: RE2 patterns whose meaning differs in Python's
re, n-gram pools with skips over random token streams, bytes elements; refusals by their codes."""
import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from rtd.errors import Code, RtdError
from rtd.kernels import compile_model

from kernel_graphs import typed_model

S, B, F, I64, I32 = TensorProto.STRING, TensorProto.BOOL, TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
RNG = np.random.default_rng(11)


def one_node(node, inputs, outputs, opset=20) -> bytes:
    return typed_model([node], inputs, outputs, opset=opset)


def agree(data: bytes, feeds: dict) -> list:
    ours = list(compile_model(data).run(feeds).values())
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape, f"{a.shape} vs {b.shape}"
        if b.dtype == object:
            assert [str(v) for v in a.reshape(-1)] == [str(v) for v in b.reshape(-1)]
        else:
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-6)
    return ours


def refused(data: bytes, feeds: dict, code: Code):
    with pytest.raises(RtdError) as e:
        compile_model(data).run(feeds)
    assert e.value.code is code, e.value


TEXTS = ["abc", "ABC", "abc\n", "a1_", "é", "É", "a b", "a\tb", "a\vb", "", "x{2}", "x{,2}", "xx", "{", "a.b", "[:a]", "K",
         "ſ", "的的", "ab\nc", "a-b", "foo@bar.com", "a]b", "\\", "ab", "a&b", "aa", "aaa", "www.bbc.co.uk", "under_score"]
# each differs between RE2 and a naive re.fullmatch somewhere, or exercises a rewrite
PATTERNS = [r"abc$", r"\w+", r"\W+", r"\d", r"\s", r"a\sb", r"[\w.-]+", r"(?i)abc", r"a(?i)bc|x", r"x{,2}", r"x{2}", r"\{",
            r"[[:alpha:]]+", r"[[:punct:]]", r"\bab\b", r"a\Bb", r"\Qa.b\E", r"\x{7684}+", r"(?<n>a)bc", r"(?P<n>a)bc",
            r".*", r"(?s).*", r"(?m)ab$\nc", r"[]a]+", r"[^]a]b", r"a[&]b", r"\\", r"(?i)k", r"a{1,2}?", r"(a|b)*", r"é",
            r"(?i)é", r"[a-c]{3}", r"^abc$", r"\Aabc\z", r"a+?", r"(?i:a)B", r"[\d\s]+", r"(\W|^)[\w.\-]{0,25}@(bar)\.com(\W|$)",
            r"\p{Greek}", r"\pL+", r"(?U)a+", r"\C", r"[\D]+", r"(a+)+b"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_full_match_agrees_with_re2(pattern):
    data = one_node(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern), [("x", S)], [("y", B)])
    agree(data, {"x": np.array(TEXTS, dtype=object).reshape(5, 6)})


@pytest.mark.parametrize("pattern", [r"(?=a)", r"(a)\1", r"a*+", r"(?>a)", r"\Z", r"a{1001}", r"(", r"[a", r"(?x)a"])
def test_regex_patterns_re2_rejects_are_refused(pattern):
    """E_MODEL_INVALID exactly where onnxruntime's RE2 rejects the pattern too (checked here)."""
    data = one_node(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern), [("x", S)], [("y", B)])
    refused(data, {"x": np.array(["a"], dtype=object)}, Code.E_MODEL_INVALID)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail):
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def test_a_pattern_that_backtracks_exponentially_in_re_runs_in_linear_time():
    """(a+)+b against a run of a's: Python's re takes time exponential in its length, RE2 linear."""
    data = one_node(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"(a+)+b"), [("x", S)], [("y", B)])
    (y,) = compile_model(data).run({"x": np.array(["a" * 100_000 + "c"], dtype=object)}).values()
    assert y.tolist() == [False]


def test_string_ops_take_bytes_elements_and_refuse_bad_utf8():
    data = one_node(helper.make_node("StringConcat", ["x", "y"], ["z"]), [("x", S), ("y", S)], [("z", S)])
    (z,) = compile_model(data).run({"x": np.array([b"caf\xc3\xa9", "a"], dtype=object), "y": np.array(["!"], dtype=object)}).values()
    assert z.tolist() == ["café!", "a!"]
    refused(data, {"x": np.array([b"\xff"], dtype=object), "y": np.array(["!"], dtype=object)}, Code.E_INPUT_INVALID)
    refused(data, {"x": np.array([1.0]), "y": np.array(["!"], dtype=object)}, Code.E_INPUT_INVALID)


@pytest.mark.parametrize("attrs", [{}, {"delimiter": ","}, {"delimiter": ", ", "maxsplit": 1}, {"maxsplit": 0}, {"delimiter": "x\x00"}])
def test_string_split_matches_onnxruntime(attrs):
    data = one_node(helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs), [("x", S)], [("y", S), ("n", I64)])
    x = np.array([["a,b,,c", " lead  and trail ", "a"], ["one, two, three", "x\x00yx\x00", "  "]], dtype=object)
    agree(data, {"x": x})


def test_string_split_where_onnxruntime_departs_from_the_spec():
    """"" on a delimiter is one empty piece and tabs are whitespace (onnx.reference; onnxruntime
    gives no piece and splits on spaces only)."""
    data = one_node(helper.make_node("StringSplit", ["x"], ["y", "n"], delimiter=","), [("x", S)], [("y", S), ("n", I64)])
    y, n = compile_model(data).run({"x": np.array(["", "a,"], dtype=object)}).values()
    assert y.tolist() == [["", ""], ["a", ""]] and n.tolist() == [1, 2]
    data = one_node(helper.make_node("StringSplit", ["x"], ["y", "n"], maxsplit=1), [("x", S)], [("y", S), ("n", I64)])
    y, n = compile_model(data).run({"x": np.array(["a\tb\nc \t", "\t"], dtype=object)}).values()
    assert y.tolist() == [["a", "b\nc"], ["", ""]] and n.tolist() == [2, 0]


@pytest.mark.parametrize("attrs", [
    {"case_change_action": "LOWER", "stopwords": ["The", "a"]}, {"case_change_action": "UPPER", "is_case_sensitive": 1, "stopwords": ["The"]},
    {"stopwords": ["Garçon", "ÉTÉ"]}, {"case_change_action": "NONE"}])
@pytest.mark.parametrize("shape", [(8,), (1, 8)])
def test_string_normalizer_matches_onnxruntime(attrs, shape):
    """onnxruntime's default locale (en_US.UTF-8) is not installed everywhere: C.UTF-8 cases alike."""
    data = one_node(helper.make_node("StringNormalizer", ["x"], ["y"], locale="C.UTF-8", **attrs), [("x", S)], [("y", S)], opset=17)
    x = np.array(["The", "the", "a", "garçon", "été", "ÉTÉ", "quick", ""], dtype=object).reshape(shape)
    agree(data, {"x": x})


def test_string_normalizer_cases_as_python_does():
    data = one_node(helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER"), [("x", S)], [("y", S)], opset=17)
    (y,) = compile_model(data).run({"x": np.array(["straße", "ﬁx", "a\x00"], dtype=object)}).values()
    assert y.tolist() == ["STRASSE", "FIX", "A\x00"]


def test_string_normalizer_refusals():
    refused(one_node(helper.make_node("StringNormalizer", ["x"], ["y"], locale="tr_TR", case_change_action="LOWER"),
                     [("x", S)], [("y", S)], opset=17), {"x": np.array(["I"], dtype=object)}, Code.E_OP_UNSUPPORTED)
    refused(one_node(helper.make_node("StringNormalizer", ["x"], ["y"]), [("x", S)], [("y", S)], opset=17),
            {"x": np.array([["a"], ["b"]], dtype=object)}, Code.E_INPUT_INVALID)


def tfidf(mode, pool, counts, columns, min_n, max_n, skip, weights=None, elem=I64):
    attrs = dict(mode=mode, ngram_counts=counts, ngram_indexes=columns, min_gram_length=min_n, max_gram_length=max_n,
                 max_skip_count=skip)
    attrs["pool_strings" if elem == S else "pool_int64s"] = pool
    if weights is not None:
        attrs["weights"] = weights
    return one_node(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), [("x", elem)], [("y", F)], opset=17)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("min_n,max_n,skip", [(1, 1, 0), (1, 3, 0), (1, 3, 2), (2, 3, 4), (3, 3, 1)])
def test_tfidf_vectorizer_on_random_token_streams_matches_onnxruntime(mode, min_n, max_n, skip):
    """A pool of 7 1-grams, 20 2-grams and 15 3-grams over a 9-token vocabulary, shuffled output
    columns, against rows of 40 random tokens (some outside the pool)."""
    uni = RNG.choice(9, 12)
    uni = RNG.permutation(9)[:7]
    bi = np.array(sorted({tuple(g) for g in RNG.choice(9, (40, 2)).tolist()})[:20])
    tri = np.array(sorted({tuple(g) for g in RNG.choice(9, (40, 3)).tolist()})[:15])
    pool = np.concatenate([uni, bi.reshape(-1), tri.reshape(-1)]).tolist()
    columns = RNG.permutation(7 + 20 + 15).tolist()
    weights = RNG.uniform(0.5, 2.0, len(columns)).astype(np.float32).tolist()
    data = tfidf(mode, pool, [0, 7, 47], columns, min_n, max_n, skip, weights if mode != "TF" else None)
    agree(data, {"x": RNG.choice(11, (6, 40)).astype(np.int64)})
    agree(data, {"x": RNG.choice(11, 40).astype(np.int64)})


def test_tfidf_vectorizer_strings_matches_onnxruntime():
    pool = ["the", "cat", "sat", "mat", "on", "the", "cat", "the", "mat", "cat", "sat", "the", "cat", "sat"]   # 5 + 3 + 1
    data = tfidf("TFIDF", pool, [0, 5, 11], [8, 7, 6, 5, 4, 3, 2, 1, 0], 1, 3, 1, [0.5, 1, 2, 3, 4, 5, 6, 7, 8], elem=S)
    x = np.array([["the", "cat", "sat", "on", "the", "mat"], ["cat", "the", "cat", "sat", "", "x"]], dtype=object)
    (y,) = agree(data, {"x": x})
    assert y.shape == (2, 9)


def test_tfidf_vectorizer_refusals():
    refused(tfidf("TF", [1, 2], [0], [0, 1], 1, 1, 0), {"x": np.array(["a"], dtype=object)}, Code.E_INPUT_INVALID)
    refused(tfidf("TF", [1, 2, 3, 4], [0, 1], [0, 1], 1, 2, 0), {"x": np.array([1])}, Code.E_MODEL_INVALID)   # 3 items of 2-grams
    refused(tfidf("TF", [1, 2, 1], [0], [0, 1, 2], 1, 1, 0), {"x": np.array([1])}, Code.E_MODEL_INVALID)      # 1 twice
    refused(tfidf("TF", [1, 2, 3], [0], [0, 1], 1, 1, 0), {"x": np.array([1])}, Code.E_MODEL_INVALID)      # 3 n-grams, 2 indexes
    refused(tfidf("IDF", [1, 2], [0], [0, 1], 1, 1, 0, [1.0]), {"x": np.array([1])}, Code.E_MODEL_INVALID)
    refused(tfidf("BM25", [1, 2], [0], [0, 1], 1, 1, 0), {"x": np.array([1])}, Code.E_MODEL_INVALID)


CORPUS = ["The quick brown fox jumps over the lazy dog", "A stitch in time saves nine!", "Never look a gift horse in the mouth",
          "the early bird catches the worm; the second mouse gets the cheese", "Actions speak louder than words.",
          "Don't count your chickens before they hatch", "Every cloud has a silver lining, they say", "Time flies like an arrow",
          "Fruit flies like a banana", "Birds of a feather flock together in time", "QUICK thinking saves the day",
          "Caf\u00e9 au lait, s'il vous pla\u00eet"]


@pytest.mark.parametrize("vectorizer", ["tfidf_1_2", "count_stop_words", "tfidf_char"])
def test_sklearn_text_pipeline_converted_by_skl2onnx(vectorizer):
    """StringNormalizer -> com.microsoft Tokenizer -> TfIdfVectorizer -> scaling and a linear
    classifier: rtd against onnxruntime and against scikit-learn itself."""
    sklearn = pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from skl2onnx.common.data_types import StringTensorType

    text = {"tfidf_1_2": TfidfVectorizer(ngram_range=(1, 2)), "count_stop_words": CountVectorizer(stop_words=["the", "a", "in"]),
            "tfidf_char": TfidfVectorizer(analyzer="char", ngram_range=(1, 3))}[vectorizer]
    labels = np.arange(len(CORPUS)) % 3
    pipe = make_pipeline(text, LogisticRegression(max_iter=500)).fit(CORPUS, labels)
    onx = skl2onnx.convert_sklearn(pipe, initial_types=[("text", StringTensorType([None, 1]))],
                                   options={id(pipe.steps[-1][1]): {"zipmap": False}, id(text): {"locale": "C.UTF-8"}},
                                   target_opset={"": 17, "ai.onnx.ml": 3})   # onnxruntime needs an installed locale
    assert sklearn.__version__ and {n.op_type for n in onx.graph.node} >= {"Tokenizer", "TfIdfVectorizer"}
    queries = np.array(CORPUS[:5] + ["time flies", "", "unseen words only"], dtype=object).reshape(-1, 1)
    data = onx.SerializeToString()
    ours = compile_model(data).run({"text": queries})
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"text": queries})
    np.testing.assert_array_equal(ours["label"], theirs[0])
    np.testing.assert_allclose(ours["probabilities"], theirs[1], rtol=1e-5, atol=1e-6)
    for row, probabilities in zip(queries, ours["probabilities"]):
        # skl2onnx tokenizes words with [a-zA-Z0-9_]+ where sklearn keeps \b\w\w+\b, and char n-grams
        # span word boundaries in sklearn only: scikit-learn agrees on ASCII text without 1-letter words
        tokens = re.findall("[a-zA-Z0-9_]+", row[0])
        if vectorizer != "tfidf_char" and row[0].isascii() and all(len(t) > 1 for t in tokens):
            np.testing.assert_allclose(probabilities, pipe.predict_proba(row)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"tokenexp": "[a-zA-Z0-9_]+"}, {"tokenexp": "[a-z]+|[A-Z]"}, {"tokenexp": "."}, {"separators": [""]}, {"separators": [" "]},
    {"separators": [" ", "[.]", "\\?", ",", ";", ":", "\\!", "\\(", "\\)", "\n", '"', "'", "-", "\\[", "\\]", "@"]},
    {"separators": [" +", ","]}, {"tokenexp": "[a-zA-Z0-9_]+", "mark": 1}, {"tokenexp": "\\w\\w+", "mincharnum": 3},
    {"tokenexp": "(a)(b)?"}])
def test_ms_tokenizer_matches_onnxruntime(attrs):
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", **{"mark": 0, "pad_value": "#", "mincharnum": 1, **attrs})
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", S, None)], [helper.make_tensor_value_info("y", S, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    x = np.array([["Hello World", "I love computer-science !  ok"], ["", "a,b;;c  d"]], dtype=object)
    agree(m.SerializeToString(), {"x": x})
    agree(m.SerializeToString(), {"x": x[0]})


def test_a_text_model_on_a_gpu_plan_runs_its_string_ops_on_the_host():
    """String ops are host-only (kernels/partition.py): StringNormalizer -> StringSplit ->
    TfIdfVectorizer stay on the host, the MatMul after them goes to the device, and the
    rewritten plan (NumPy, identity copies) answers what the CPU plan answers."""
    from test_partition import cut, placed, run_rewritten

    from rtd.kernels.partition import DEVICE, HOST
    pool = ["the", "cat", "sat", "on", "mat", "the", "cat", "cat", "sat"]
    nodes = [helper.make_node("StringNormalizer", ["text"], ["lower"], case_change_action="LOWER"),
             helper.make_node("StringSplit", ["lower"], ["words", "n"]),
             helper.make_node("TfIdfVectorizer", ["words"], ["tf"], mode="TF", min_gram_length=1, max_gram_length=2,
                              max_skip_count=0, ngram_counts=[0, 5], ngram_indexes=list(range(7)), pool_strings=pool),
             helper.make_node("MatMul", ["tf", "w"], ["y"])]
    w = RNG.standard_normal((7, 3)).astype(np.float32)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("text", S, None)],
                              [helper.make_tensor_value_info("y", F, None)], [helper.make_tensor("w", F, [7, 3], w.reshape(-1))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    feeds = {"text": np.array(["The cat sat", "on THE mat the cat"], dtype=object)}
    compiled, lowered, shapes, static, part = cut(m, feeds)
    where = placed(lowered, part)
    sides = {k.split(":")[0]: v for k, v in where.items()}
    assert sides.items() >= {("StringNormalizer", HOST), ("StringSplit", HOST), ("TfIdfVectorizer", HOST), ("MatMul", DEVICE)}
    got, _, _ = run_rewritten(compiled, lowered, shapes, static, part, feeds)
    np.testing.assert_array_equal(got["y"], compiled.run(feeds)["y"])
