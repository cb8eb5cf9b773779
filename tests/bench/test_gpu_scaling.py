"""zoo.bench.gpu_scaling: how a sweep's wall time splits into its groups' seconds and the seconds around them."""
from zoo.bench.gpu_scaling import time_spent


def test_time_spent_counts_each_group_once_and_the_span():
    def run(lr, started, finished, d=64):
        return {"started": started, "finished": finished, "settings": {"model.d_model": d, "train.lr": lr}}

    # group d=64 from 0 to 5 (its members overlap), group d=128 from 2 to 10: 5 + 8 s of groups, 10 s of span
    records = [run(1e-3, 0.0, 4.0), run(1e-2, 0.1, 5.0), run(1e-3, 2.0, 10.0, d=128), run(1e-2, 2.0, 9.0, d=128)]
    assert time_spent(records) == {"groups_s": 13.0, "span_s": 10.0}
    assert time_spent([]) == {"groups_s": 0.0, "span_s": 0.0}
