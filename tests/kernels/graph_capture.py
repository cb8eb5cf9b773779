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


def assert_replays_like_eager(step, leaf: torch.Tensor):
    """Records ``step`` (forward and backward; its first output detached), gives ``leaf`` new random values and
    replays: the graph's outputs equal an eager ``step()`` on the new values bit for bit, and its first output
    differs from the one before (the replay really recomputed it)."""
    before = step()
    graph, captured = capture(step)
    with torch.no_grad():
        leaf.copy_(torch.randn_like(leaf))
    graph.replay()
    assert all(torch.equal(c, e) for c, e in zip(captured, step()))
    assert not torch.equal(captured[0], before[0])
