"""The chunked (gated) delta rule against the step-by-step recurrence: exact in float64 (outputs and gradients,
every option, lengths that the chunk does not divide), close in float32 over long sequences, dispatched by
``delta_rule``, and on GPU the same and capturable in a CUDA graph."""
import importlib.util

import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.backend import fla_chunks_unreliable
from zoo.kernels.delta_rule import delta_rule
from zoo.kernels.delta_rule.chunked import delta_rule_chunked
from zoo.kernels.delta_rule.naive import delta_rule_recurrent

from delta_rule_inputs import inputs
from graph_capture import capture

NAMES = ("q", "k", "v", "beta", "g")


def relative_error(a, b):
    return float((a - b).norm() / b.norm())


def output_and_grads(fn, args, gated, gy, **kwargs):
    """fn's output and its gradients w.r.t. q, k, v, beta (and g when gated), for the output gradient gy."""
    wrt = [t.detach().clone().requires_grad_() for t in (args if gated else args[:4])]
    o = fn(*wrt[:4], wrt[4] if gated else None, **kwargs)
    return o.detach(), torch.autograd.grad(o, wrt, gy)


def assert_matches(got, want, tol):
    (o, grads), (o_want, grads_want) = got, want
    assert relative_error(o, o_want) < tol
    for name, a, b in zip(NAMES, grads, grads_want):
        assert relative_error(a, b) < tol, name


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("beta_max", [1.0, 2.0])
@pytest.mark.parametrize("T, chunk", [(37, 8), (37, 16), (32, 8), (5, 8)])
def test_matches_recurrence_in_float64(gated, beta_max, T, chunk):
    """Chunks that divide T and that do not (zero-padded), and T < chunk (one shorter chunk); K != V."""
    torch.manual_seed(0)
    args = inputs(2, T, 3, 5, 4, beta_max)
    gy = torch.randn(2, T, 3, 4, dtype=torch.float64)
    assert_matches(output_and_grads(delta_rule_chunked, args, gated, gy, chunk=chunk),
                   output_and_grads(delta_rule_recurrent, args, gated, gy), 1e-10)


@pytest.mark.parametrize("gated", [False, True])
def test_l2norm_and_scale_match_recurrence_in_float64(gated):
    torch.manual_seed(0)
    q, k, v, beta, g = inputs(2, 37, 2, 6, 3, beta_max=2.0)
    args = (3 * q, 2 * k + 0.1, v, beta, g)  # keys neither unit-length nor centred before the normalization
    gy = torch.randn(2, 37, 2, 3, dtype=torch.float64)
    options = {"scale": 0.3, "l2norm_qk": True}
    assert_matches(output_and_grads(delta_rule_chunked, args, gated, gy, chunk=16, **options),
                   output_and_grads(delta_rule_recurrent, args, gated, gy, **options), 1e-10)


@pytest.mark.parametrize("gate", [None, 4.0, -2.0], ids=["ungated", "weak-gate", "strong-gate"])
def test_float32_matches_float64_recurrence_over_256_steps(gate):
    """Four chunks of 64, beta up to 2 (negative eigenvalues); a strong gate (log gate about -2.1 a step) sums to
    about -135 over a chunk. Measured relative errors: at most 6e-7 (the float32 recurrence: 4e-7), but 3.4e-6 on
    g's gradient under the strong gate (the recurrence: 1.3e-7): the chunks exponentiate differences of
    cumulative log gates, whose float32 rounding grows with the sum."""
    torch.manual_seed(0)
    args = inputs(2, 256, 2, 32, 32, beta_max=2.0, log_gate_shift=gate or 0.0)
    gy = torch.randn(2, 256, 2, 32, dtype=torch.float64)
    got = output_and_grads(delta_rule_chunked, [t.float() for t in args], gate is not None, gy.float(), chunk=64)
    assert got[0].dtype == torch.float32
    assert_matches(got, output_and_grads(delta_rule_recurrent, args, gate is not None, gy), 3e-5)


def test_low_precision_inputs_give_outputs_in_their_dtype():
    torch.manual_seed(0)
    args = [t.bfloat16() for t in inputs(1, 20, 2, 8, 8, beta_max=2.0)]
    got = delta_rule_chunked(*args, chunk=8)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, delta_rule_recurrent(*args).bfloat16())  # both compute in float32


def test_delta_rule_dispatches_chunked_and_auto_keeps_the_recurrence_on_cpu():
    torch.manual_seed(0)
    q, k, v, beta, g = inputs(2, 12, 2, 4, 3, beta_max=2.0)
    for gate in (None, g):
        backend.clear()
        got = delta_rule(q, k, v, beta, gate, l2norm_qk=True, backend="chunked")
        assert backend.last_backend("delta_rule") == "chunked"
        want = delta_rule(q, k, v, beta, gate, l2norm_qk=True, backend="auto")
        assert backend.last_backend("delta_rule") == "naive"
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match=r"backend='chunk' is not valid: expected one of .*chunked.*"):
        delta_rule(q, k, v, beta, g, backend="chunk")


@pytest.mark.gpu
def test_chunked_on_gpu_matches_recurrence_and_captures_in_a_cuda_graph():
    """Forward and backward in one CUDA graph (no host syncs), replayed on new inputs; and "auto" takes the
    chunked form for the gated op wherever fla's gated chunks cannot run."""
    torch.manual_seed(0)
    args = inputs(4, 100, 2, 32, 48, beta_max=2.0, device="cuda")
    gy = torch.randn(4, 100, 2, 48, dtype=torch.float64, device="cuda")
    want = output_and_grads(delta_rule_recurrent, args, True, gy)
    assert_matches(output_and_grads(delta_rule_chunked, [t.float() for t in args], True, gy.float()), want, 3e-5)

    static = [t.float().requires_grad_() for t in inputs(4, 100, 2, 32, 48, beta_max=2.0, device="cuda")]
    gy32 = gy.float()

    def step():
        o = delta_rule_chunked(*static)
        return (o, *torch.autograd.grad(o, static, gy32))

    graph, captured = capture(step)
    with torch.no_grad():
        for buffer, value in zip(static, args):
            buffer.copy_(value)
    graph.replay()
    assert_matches((captured[0].detach().double(), [t.double() for t in captured[1:]]), want, 3e-5)

    fla_gated = importlib.util.find_spec("fla") is not None and not fla_chunks_unreliable(0)
    delta_rule(*[t.bfloat16() for t in args], backend="auto")  # fla's chunks take 16-bit inputs only
    assert backend.last_backend("delta_rule") == ("fla" if fla_gated else "chunked")
