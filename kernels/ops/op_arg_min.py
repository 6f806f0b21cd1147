"""ArgMin: the index of the smallest element along an axis (the last one with select_last_index)."""
from ._arg_extreme import ArgExtreme


class ArgMin_12(ArgExtreme):
    pick = "argmin"


class ArgMin_1(ArgMin_12):
    attributes = {"axis": 0, "keepdims": 1}
    select_last_index = 0
