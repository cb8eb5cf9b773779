"""The causality check every mixer test file runs: changing token ``at`` leaves outputs before it unchanged
and changes some output from ``at`` on."""
import torch


def assert_causal(model, vocab: int = 64, length: int = 24, at: int = 15) -> None:
    model.eval()
    ids = torch.randint(0, vocab, (2, length))
    changed = ids.clone()
    changed[:, at] = (ids[:, at] + 1) % vocab
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :at], b[:, :at], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[:, at:], b[:, at:])
