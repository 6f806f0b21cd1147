"""HammingWindow: the Hamming window of a given size (periodic by default)."""
from ._cosine_window import CosineWindow


class HammingWindow_17(CosineWindow):
    coefficients = (25 / 46, 21 / 46, 0.0)
