"""Recording a kernel's forward and backward into a CUDA graph, as the training step does (GPU tests)."""
import torch


def capture(step, warmups: int = 1):
    """(graph, outputs of ``step()`` recorded in it): ``step`` runs ``warmups`` times on a side stream first (Triton
    compiles, autograd warms up), then once under capture, off the default stream as capture requires. Replaying the
    graph recomputes the outputs in place from the current values of the tensors ``step`` reads."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs
