"""BlackmanWindow: the Blackman window of a given size (periodic by default)."""
from ._cosine_window import CosineWindow


class BlackmanWindow_17(CosineWindow):
    coefficients = (0.42, 0.5, 0.08)
