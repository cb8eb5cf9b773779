"""A CPU install without Triton (the quickstart's `pip install torch -e .`: PyTorch's CPU wheel brings none) builds and
trains every registered mixer: zoo imports Triton only where a kernel is launched, on a GPU."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["triton"] = None  # any `import triton` now raises ImportError
    import torch
    import zoo.sweep  # noqa: F401  (the quickstart's entry point and everything it imports)
    from zoo.mixers.registry import list_mixers
    from zoo.model import LanguageModel
    ids, positions = torch.randint(0, 32, (2, 32)), torch.tensor([[3, 9, 17, 31], [0, 1, 2, 30]])
    for mixer in list_mixers():
        model = LanguageModel(32, 64, n_layers=2, mixer=mixer, max_seq_len=32)
        model.logits(model(ids, positions)).square().mean().backward()
        assert model.embed.weight.grad is not None and model.blocks[0].norm1.weight.grad is not None, mixer
    print("trained", len(list_mixers()), "mixers")
""")


def test_every_mixer_trains_a_step_without_triton():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained" in done.stdout
