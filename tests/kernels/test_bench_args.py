"""``python -m zoo.kernels.bench`` refuses a malformed shape before it looks for a GPU: exit 2, naming the option
and the expected form."""
import pytest

from zoo.kernels.bench import main, parse_args


@pytest.mark.parametrize("argv, option, form", [(["--recurrences", "128,128,2"], "--recurrences", "B,T,H,K"),
                                                (["--scan", "64,x"], "--scan", "T,H"),
                                                (["--shapes", "1,2,3,4,0"], "--shapes", "B,H,T,D,window"),
                                                (["--attention-blocks", "256,2,512,64"], "--attention-blocks",
                                                 "B,H,T,D,window"),
                                                (["--gated-long-conv", "256,256"], "--gated-long-conv", "B,L,D"),
                                                (["--rwkv7", "256,256,2"], "--rwkv7", "B,T,H,K"),
                                                (["--layer-norm", "65536"], "--layer-norm", "R,N"),
                                                (["--linear", "65536,128"], "--linear", "M,K,N"),
                                                (["--head-parts", "256,256,128"], "--head-parts", "B,L,D,H"),
                                                (["--linear-cross-entropy", "4096,8192"], "--linear-cross-entropy",
                                                 "R,D,V"),
                                                (["--softmax-attention", "128,512,1"], "--softmax-attention",
                                                 "B,N,H,D"),
                                                (["--attention-rows", "256,256,16,1"], "--attention-rows",
                                                 "B,L,K,H,D"),
                                                (["--sum-rows", "176,384"], "--sum-rows", "G,P,N"),
                                                (["--ssd", "256,256,4,64"], "--ssd", "B,L,H,P,N"),
                                                (["--wkv4", "256,256"], "--wkv4", "B,L,C"),
                                                (["--embedding", "256,256"], "--embedding", "B,N,D")])
def test_a_malformed_shape_exits_2_naming_the_option(argv, option, form, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and f"expected {form} as positive integers" in err


def test_sections_given_shapes_run_alone_and_empty_ones_are_skipped():
    everything = parse_args([])
    assert everything.rwkv7 == [(256, 256, 2, 64)] and everything.scan == (65536, 64) and everything.shapes
    alone = parse_args(["--rwkv7", "128,512,2,64"])
    assert alone.rwkv7 == [(128, 512, 2, 64)]
    assert alone.shapes == [] and not alone.scan and not alone.recurrences and alone.sum_rows == []
    skipped = parse_args(["--scan", "", "--shapes"])
    assert skipped.scan is None and skipped.shapes == []
    assert skipped.rwkv7 == [(256, 256, 2, 64)] and skipped.recurrences == (128, 128, 2, 64)
