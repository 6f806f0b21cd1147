"""HannWindow: the Hann window of a given size (periodic by default)."""
from ._cosine_window import CosineWindow


class HannWindow_17(CosineWindow):
    coefficients = (0.5, 0.5, 0.0)
