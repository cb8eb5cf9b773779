"""Random MQAR-shaped batches for the tests of a group's per-batch calls (training step, test pass)."""
import torch


def random_batches(device, n=12, shapes=((8, 16, 3), (5, 16, 3))):
    """``n`` batches (inputs (B, N), positions (B, K), targets (B, K), one target -100) over a vocabulary of 64,
    cycling through ``shapes`` (B, N, K)."""
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        B, N, K = shapes[i % len(shapes)]
        x = torch.randint(0, 64, (B, N), generator=g)
        pos = torch.randint(0, N, (B, K), generator=g)
        y = torch.randint(0, 64, (B, K), generator=g)
        y[0, 0] = -100
        yield x.to(device), pos.to(device), y.to(device)
