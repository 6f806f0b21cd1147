"""StringNormalizer: a [C] or [1, C] tensor of words with the `stopwords` removed, then lower-
or upper-cased (case_change_action LOWER, UPPER or NONE).

Stop words match whole elements, compared case-blind unless is_case_sensitive. When every
word is removed the output is one "" ([1] or [1, 1]). Case changes follow Unicode's default full
mappings, as Python's str.lower/upper (and so sklearn, whose lowercase a converted pipeline
replaces) do: "ß" upper-cases to "SS", where onnxruntime's per-character towupper keeps "ß". They
are the same in every `locale`: the locales whose rules differ (Turkish and Azeri dotted i,
Lithuanian) are refused rather than cased wrongly.
"""
import numpy as np

from rtd.errors import Code

from ._strings import TEXT, StringKernel, as_objects

_OWN_CASING = ("tr", "az", "lt")


class StringNormalizer_10(StringKernel):
    attributes = {"case_change_action": "NONE", "is_case_sensitive": 0, "locale": "", "stopwords": None}

    def setup(self):
        if self.case_change_action not in ("LOWER", "UPPER", "NONE"):
            self.refuse(f"case_change_action {self.case_change_action!r} is not LOWER, UPPER or NONE")
        if self.locale.replace("-", "_").split("_")[0].lower() in _OWN_CASING:
            self.refuse(f"locale {self.locale!r} has casing rules of its own", Code.E_OP_UNSUPPORTED)
        stops = np.array(self.stopwords or [], dtype=TEXT)
        self.stops = stops if self.is_case_sensitive else np.strings.lower(stops)

    def compute(self, x):
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            self.refuse(f"input must be [C] or [1, C], got shape {list(x.shape)}", Code.E_INPUT_INVALID)
        words = self.strings(x).reshape(-1)
        if self.stops.size:
            keys = words if self.is_case_sensitive else np.strings.lower(words)
            words = words[~np.isin(keys, self.stops)]
        if self.case_change_action == "LOWER":
            words = np.strings.lower(words)
        elif self.case_change_action == "UPPER":
            words = np.strings.upper(words)
        if words.size == 0:
            words = np.array([""], dtype=TEXT)
        return (as_objects(words).reshape(x.shape[:-1] + (-1,)),)
