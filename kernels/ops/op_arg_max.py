"""ArgMax: the index of the largest element along an axis (the last one with select_last_index)."""
from ._arg_extreme import ArgExtreme


class ArgMax_12(ArgExtreme):
    pick = "argmax"


class ArgMax_1(ArgMax_12):
    attributes = {"axis": 0, "keepdims": 1}
    select_last_index = 0
