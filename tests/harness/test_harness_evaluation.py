"""The test pass of a group (zoo.evaluation.EvalPass): each member's batch sums, eagerly and from CUDA graphs."""

import pytest
import torch
import torch.nn.functional as F

from group_batches import random_batches
from zoo.evaluation import SUMS, EvalPass, batch_sums, macro_accuracy
from zoo.model import LanguageModel
from zoo.step import Member


def _group(device, n=3, dropout=0.0):
    members = []
    for seed in range(n):
        torch.manual_seed(seed)
        model = LanguageModel(vocab_size=64, d_model=32, n_layers=2, mixer="softmax", max_seq_len=16,
                              dropout=dropout).to(device).eval()
        members.append(Member(model, model, torch.optim.SGD(model.parameters(), lr=0.0)))
    return members


def test_batch_sums_are_the_metrics_parts():
    torch.manual_seed(0)
    logits = torch.randn(4, 3, 10)
    targets = logits.argmax(-1)
    targets[0, 1] = (targets[0, 1] + 1) % 10  # one wrong token: sequence 0 is wrong
    targets[1, 2] = -100  # one unlabelled position
    sums = dict(zip(SUMS, batch_sums(logits, targets).tolist()))
    assert sums["labelled tokens"] == 11 and sums["correct tokens"] == 10
    assert sums["sequences"] == 4 and sums["correct sequences"] == 3 and sums["batches"] == 1
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
    assert sums["loss"] == pytest.approx(expected.item(), rel=1e-6)
    assert sums["batch macro accuracy"] == pytest.approx(macro_accuracy(logits.argmax(-1), targets, 10).item())


def test_each_member_gets_its_own_sums_and_a_stopped_member_zeros():
    members = _group(torch.device("cpu"))
    test = EvalPass(members, bf16=False, graphs=False)
    x, pos, y = next(random_batches(torch.device("cpu")))
    with torch.inference_mode():
        sums = test(x, pos, y).clone()
    for member, row in zip(members, sums):
        with torch.no_grad():
            expected = batch_sums(member.model.logits(member.model(x, pos)).float(), y)
        assert torch.allclose(row, expected)
    assert not torch.equal(sums[0], sums[1])  # other weights, other losses
    test.deactivate(1)
    with torch.inference_mode():
        after = test(x, pos, y)
    assert torch.equal(after[1], torch.zeros(len(SUMS), dtype=torch.float64))
    assert torch.equal(after[0], sums[0]) and torch.equal(after[2], sums[2])


@pytest.mark.gpu
def test_graph_replays_give_the_eager_sums():
    """Two batch shapes, three members, under inference mode as Lightning tests: the graphs were recorded (the fast
    path ran) and their sums are the eager pass's; after a stop the survivors are recorded again."""
    device = torch.device("cuda")
    members = _group(device)
    eager, graphed = EvalPass(members, bf16=True, graphs=False), EvalPass(members, bf16=True, graphs=True)
    batches = list(random_batches(device, n=12))
    with torch.inference_mode():
        for batch in batches:
            expected = eager(*batch).clone()
            assert torch.allclose(graphed(*batch), expected, rtol=1e-6), batch[0].shape
        assert len(graphed.recorded) == 2 and graphed.graphs
        graphed.deactivate(0)
        for batch in batches[:7]:  # the first shape 4 times (3 warm-ups, then recorded), the second 3
            got = graphed(*batch)
            assert torch.equal(got[0], torch.zeros_like(got[0]))
            assert torch.allclose(got[1:], eager(*batch)[1:], rtol=1e-6)
        assert len(graphed.recorded) == 1  # the first shape recorded again for the two members left
