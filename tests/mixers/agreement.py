"""GPU fast path against the CPU reference: the same model's outputs and every parameter's gradient agree."""
import torch


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def assert_gpu_matches_cpu(cpu: torch.nn.Module, gpu: torch.nn.Module, out_cpu: torch.Tensor, out_gpu: torch.Tensor,
                           tol: float) -> None:
    """Backpropagate one random output gradient through both models; outputs within ``tol``, gradients within
    ``2 * tol`` (relative, L2)."""
    gy = torch.randn_like(out_cpu)
    out_cpu.backward(gy)
    out_gpu.float().backward(gy.cuda())
    assert relative_error(out_gpu.cpu(), out_cpu) < tol
    for (name, p_cpu), p_gpu in zip(cpu.named_parameters(), gpu.parameters()):
        if p_cpu.grad is not None:
            assert relative_error(p_gpu.grad.cpu(), p_cpu.grad) < 2 * tol, name
