"""zoo's gatedfwa(variant="released") against the authors' released layer (fixtures from
make_gatedfwa_released.py): outputs, input gradients and every parameter gradient.

Name map: c_q, c_k, c_v stack into ``qkv``; ``c_proj`` is ``out_proj``; ``weight_lambda`` is
``beta_proj``; the released forget-gate logit is the negative of zoo's gate, so ``fgate_proj`` is
``(-gate.weight, -gate_bias)``; ``ShiftLinear.shift_proj`` is ``{k,v}_shift.proj``.
"""
import pytest
import torch
from fixtures import load_fixture, max_abs_error
from layer import run_with_weights

from zoo.mixers.gatedfwa import GatedFWA

TOL = 1e-4  # float32 rounding: the released layer computes the gate amplitude, log f and shift weights in float32


def zoo_weights(fx: dict, shift: bool) -> dict[str, torch.Tensor]:
    k, v = ("c_k.linear", "v_proj.linear") if shift else ("c_k", "c_v")
    w = {"qkv.weight": torch.cat([fx["weight.c_q.weight"], fx[f"weight.{k}.weight"], fx[f"weight.{v}.weight"]]),
         "out_proj.weight": fx["weight.c_proj.weight"], "beta_proj": fx["weight.weight_lambda"],
         "gate.weight": -fx["weight.fgate_proj.weight"], "gate_bias": -fx["weight.fgate_proj.bias"]}
    if shift:
        w |= {"k_shift.proj.weight": fx["weight.c_k.shift_proj.weight"],
              "v_shift.proj.weight": fx["weight.v_proj.shift_proj.weight"]}
    return w


def reference_grads(fx: dict, shift: bool) -> dict[str, torch.Tensor]:
    """The fixture's gradients under zoo's names (same map as the weights)."""
    return zoo_weights({k.replace("grad.", "weight.", 1): t for k, t in fx.items() if k.startswith("grad.")}, shift)


@pytest.mark.parametrize("shift", [False, True])
def test_released_variant_matches_the_authors_layer(shift):
    fx = load_fixture("gatedfwa_released_shift" if shift else "gatedfwa_released")
    layer = GatedFWA(32, num_heads=2, window=5, variant="released", positions="rope", k_shift=shift, v_shift=shift)
    y, gx, grads = run_with_weights(layer, zoo_weights(fx, shift), fx["x"], fx["gy"])
    assert max_abs_error(y, fx["y"]) < TOL
    assert max_abs_error(gx, fx["grad.x"]) < TOL
    for name, expected in reference_grads(fx, shift).items():
        assert max_abs_error(grads[name], expected) < TOL, name


def test_fixture_exercises_rope_and_the_gate():
    """Without RoPE, or with the gate's sign flipped, the output is far from the reference."""
    fx = load_fixture("gatedfwa_released")
    for positions, sign in (("none", 1), ("rope", -1)):
        w = zoo_weights(fx, shift=False)
        w["gate_bias"] = sign * w["gate_bias"]
        layer = GatedFWA(32, num_heads=2, window=5, variant="released", positions=positions)
        y, _, _ = run_with_weights(layer, w, fx["x"], fx["gy"])
        assert max_abs_error(y, fx["y"]) > 1e-2, (positions, sign)
