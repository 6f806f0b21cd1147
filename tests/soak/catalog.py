"""The soak's models and the answers each must give. A model is named by a key: an int is
the MLP of that weight seed (answers from onnxruntime, cached), "bomb" the hostile
tenant's memory bomb, "slow" its chain of MatMuls, "big" a package larger than a tenant's
disk budget (it may never be persisted). `identify` tells from a loaded model's answers
which of the keys it may be holding it is, or None."""
import functools

import numpy as np
import onnxruntime

from rtd.cli.client import Client
from rtd.errors import Code, RtdError
from tests.daemon.conftest import memory_bomb, mlp, slow_model

INPUTS = 8           # calm requests pick one of these inputs; each seed's answers are computed once
SLOW = dict(layers=12, width=384)
BIG_WIDTH = 1500     # one 1500×1500 float32 weight: 9 MB, above tenant_disk_bytes (8 MiB)
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


@functools.lru_cache(maxsize=64)
def model_bytes(key) -> bytes:
    if isinstance(key, int):
        return mlp(key)
    return {"bomb": memory_bomb, "slow": lambda: slow_model(**SLOW),
            "big": lambda: slow_model(layers=1, width=BIG_WIDTH)}[key]()


class Catalog:
    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.inputs = [rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32) for _ in range(INPUTS)]
        # bounded: a long run loads hundreds of thousands of seeds, each answered a few times
        self.answers = functools.lru_cache(maxsize=512)(self._answers)

    def _answers(self, seed: int) -> tuple:
        session = onnxruntime.InferenceSession(model_bytes(seed), providers=["CPUExecutionProvider"])
        return tuple(session.run(None, {"X": x})[0] for x in self.inputs)

    def matches(self, seed: int, index: int, got: np.ndarray) -> bool:
        want = self.answers(seed)[index]
        return got.shape == want.shape and bool(np.allclose(got, want, **TOLERANCE))

    def which(self, keys, index: int, got: np.ndarray):
        """The MLP seed among `keys` whose answer to input `index` is `got`, or None."""
        return next((k for k in keys if isinstance(k, int) and self.matches(k, index, got)), None)

    def identify(self, client: Client, name: str, keys, timeout: float = 30.0):
        """Which of `keys` the loaded model `name` answers as, or None; RtdError if it does
        not answer (a probe whose input does not fit is skipped: another key may fit)."""
        for probe in self._probes(keys):
            try:
                found = probe(client, name, timeout)
            except RtdError as e:
                if e.code != Code.E_INPUT_INVALID:
                    raise
                continue
            if found is not None:
                return found
        return None

    def _probes(self, keys):
        seeds = [k for k in keys if isinstance(k, int)]
        if seeds:
            yield lambda c, n, t: self.which(seeds, 0, c.infer(n, {"X": self.inputs[0]}, timeout=t)["Y"])
        if "bomb" in keys:
            def bomb(c, n, t):
                got = c.infer(n, {"V": np.full(1, 2, np.float32), "S": np.array([2, 3], np.int64)}, timeout=t)["Y"]
                return "bomb" if got.shape == (2, 3) and bool(np.all(got == 2)) else None
            yield bomb
        for key, width, layers in (("slow", SLOW["width"], SLOW["layers"]), ("big", BIG_WIDTH, 1)):
            if key in keys:
                def chain(c, n, t, key=key, width=width, layers=layers):
                    got = c.infer(n, {"X": np.ones((1, width), np.float32)}, timeout=t)["Y"]
                    return key if got.shape == (1, width) and np.allclose(got, 0.999 ** layers, rtol=1e-4) else None
                yield chain
