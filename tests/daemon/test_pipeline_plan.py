"""A pipeline's plan checked from signatures alone (daemon/serving/pipeline.py): the running order
follows the maps, what the first step hands on and the last one answers is derived from them,
and every map that does not fit is one E_ENSEMBLE_INVALID naming what is wrong."""
import pytest

from rtd.daemon.serving.pipeline import Plan, Runner, Step
from rtd.errors import Code, RtdError
from rtd.signature import Signature, TensorSpec


def sig(inputs: dict, outputs: dict) -> Signature:
    return Signature(tuple(TensorSpec(n, "float32", s) for n, s in inputs.items()),
                     tuple(TensorSpec(n, "float32", s) for n, s in outputs.items()))


A = sig({"X": ("N", 4)}, {"Y": ("N", 3)})
B = sig({"X": ("N", 3)}, {"Y": ("N", 3)})
C = sig({"X": ("N", 3), "Z": ("N", 4)}, {"Y": ("N", 2)})
INPUTS = (TensorSpec("pixels", "float32", (None, 4)),)
OUTPUTS = (TensorSpec("scores", "float32", (None, 2)),)


def check(steps, signatures, outputs=OUTPUTS):
    return Plan.check("e", INPUTS, outputs, steps, signatures)


def test_the_order_follows_the_maps_whatever_order_the_steps_are_listed_in():
    steps = [Step("c", {"X": "h2", "Z": "pixels"}, {"Y": "scores"}), Step("a", {"X": "pixels"}, {"Y": "h1"}),
             Step("b", {"X": "h1"}, {"Y": "h2"})]
    plan = check(steps, [C, A, B])
    assert [s.label for s in plan.steps] == ["a", "b", "c"]
    assert plan.after == [[], [0], [1]] and plan.producer == {"h1": 0, "h2": 1, "scores": 2}
    runner = Runner(plan, "1", None, None, None)
    first, _ = runner._call(0, None)
    assert first.fields["keep_inputs"] == ["pixels"] and first.fields["keep"] == ["Y"] and first.hands_on
    assert first.fields["expect"]["outputs"] == ["scores"]


@pytest.mark.parametrize("steps, signatures, detail", [
    ([], [], "no steps"),
    ([Step("a", {"X": "pixels"}, {"Y": "h"}), Step("a", {"X": "h"}, {"Y": "scores"})], [A, B], "named by steps 1 and 2"),
    ([Step("a", {"X": "pixels"}, {"Y": "h"}), Step("b", {"X": "nowhere"}, {"Y": "scores"})], [A, B], "which no input"),
    ([Step("b", {"X": "h2"}, {"Y": "h1"}), Step("b2", {"X": "h1"}, {"Y": "h2"}), Step("c", {"X": "h2", "Z": "pixels"},
                                                                                    {"Y": "scores"})], [B, B, C], "cycle"),
    ([Step("a", {"X": "pixels"}, {"Y": "pixels"})], [A], "an input of the ensemble"),
    ([Step("a", {"X": "pixels"}, {"Y": "h"}), Step("b", {"X": "pixels"}, {"Y": "h"})], [A, A], "written by steps"),
    ([Step("a", {}, {"Y": "scores"})], [A], "inputs not mapped ['X']"),
    ([Step("a", {"X": "pixels"}, {"Nope": "scores"})], [A], "no output 'Nope'"),
    ([Step("b", {"X": "pixels"}, {"Y": "scores"})], [B], "shape"),
    ([Step("a", {"X": "pixels"}, {"Y": "h"})], [A], "written by no step"),
])
def test_maps_that_do_not_fit_are_refused(steps, signatures, detail):
    with pytest.raises(RtdError) as e:
        check(steps, signatures)
    assert e.value.code == Code.E_ENSEMBLE_INVALID and detail in e.value.detail, e.value


def test_types_must_meet():
    ints = Signature((TensorSpec("X", "int64", ("N", 4)),), (TensorSpec("Y", "float32", ("N", 2)),))
    with pytest.raises(RtdError) as e:
        check([Step("a", {"X": "pixels"}, {"Y": "scores"})], [ints])
    assert e.value.code == Code.E_ENSEMBLE_INVALID and "INT64 is read" in e.value.detail
