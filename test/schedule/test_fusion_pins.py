"""Pinned fusion decisions of whole training steps: a change in kernel count or FLOP total means the scheduler
decided differently (schedule/kernelize.py find_realizes), which a speed-up of the scheduler must not do."""

from __future__ import annotations

from fusegrad import Tensor


def test_convnet_training_step_kernels_and_flops_are_pinned() -> None:
    """The MNIST convnet's forward and backward (conv, batchnorm, pool, linear, loss): 40 kernels doing 29,851,095
    ops (the renderer's estimate). Fusion decisions of the conv backward have changed by accident before (an
    incremental find_realizes): a different count or a different FLOP total says a decision changed. (The total rose
    from 34,860,235 when relu and the float >=/<= became NaN-correct compares, 7aa9fc2: the same 45 kernels. It fell
    from 37,156,555 when the conv input gradients became direct window reduces, schedule/windows.py: 9 window
    positions instead of 16 copies, no div/mod indices, no gates on in-bounds loads: the same 45 kernels. 44 since a
    row statistic read inside the reduce over its row (batchnorm's 1/sqrt(var + eps) in its backward) is computed
    once per row in that kernel instead of being stored by a kernel of its own, rangeify.is_recomputed_in_reduce.
    34,231,115 since the estimate counts a vector op once per lane: counted once, the total depended on the host's
    vector width, 34,111,115 with AVX-512's 16 lanes. 40 doing 34,232,279 since a row's statistics read inside the
    loops over that row are computed in the kernel reading them (#12 row fusion: the loss's log_softmax max and sum,
    batchnorm's backward row sums), a backward kernel computing the forward's again over the row it reads. 34,231,639
    since the loss's backward keeps its exp in a row buffer, codegen/rowbuffer.py, instead of computing it per pass.
    31,210,071 since the max pools' backward window sums (stride equal to the kernel: one term per input pixel) read
    that term instead of summing the window, codegen/gather.py collapse_window_sum: the same 40 kernels. 30,867,799
    since that term's input index folds to the pixel's own (x - x % 2 is written (x // 2) * 2): less index math.
    31,300,439 after a051628 (triangular loops, codegen/clip.py), which left this pin as it was. 31,213,911 since the
    pool backward's loop over x reading x // 2 is upcast by 2, codegen/opt.py spread_opts: each pair of pixels loads
    and divides its pooled values once (86,528 fewer). 30,532,503 since conv1's forward (26 unpadded columns) tiles
    its 16 channels with the weights packed, codegen/opt.py channel_tile_opts: each pixel cast and scaled once per
    13 columns x 16 channels, not per 8 x 2 scalar tile. 29,851,095 since conv1's weight gradient packs the output
    gradient one image at a time, codegen/opt.py reduce_panel_opts: channels as lanes, the 9 taps as rows, each pixel
    cast and scaled once per tile, not once per tap. 30,949,335 since adjacent loops that every index walks as one
    merge, schedule/merge.py: the same 40 kernels, one counted differently. The conv2 input gradient's window
    kernel (16, 8, 3, 11, 13) became (16, 24, 11, 13), and the heuristic upcasts its 24 (lanes strided by 3) where it
    upcast the 13 columns; 8% slower alone at the bench's width, while the batchnorm sums over (16, 26, 26) ->
    (16, 676) run 2-4x faster: the jitted step 6.1-6.6 -> 4.7-5.0 ms at width 16, batch 64. 29,851,095 again since a
    gathered vector axis must be contiguous in the output too (codegen/opt.py upcast_opts): that kernel upcasts its
    13 columns as before, within 4% of BEAM=2's best at width 16.)"""
    from fusegrad import Device
    from fusegrad.engine.realize import get_program
    from fusegrad.examples.mnist import ConvNet
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters
    from fusegrad.uop import Ops

    Tensor.manual_seed(0)
    Tensor.training = True
    model = ConvNet(8)
    optimizer = Adam(get_parameters(model))
    Tensor.realize(*get_parameters(model))
    images, labels = Tensor.empty(16, 1, 28, 28, dtype="uint8"), Tensor.empty(16, dtype="int32")
    optimizer.zero_grad()
    loss = model(images.float() / 255.0).sparse_categorical_crossentropy(labels).backward()
    items = loss.schedule(*[p.grad for p in optimizer.params if p.grad is not None])
    kernels = [item for item in items if item.ast.op is Ops.SINK]
    assert len(kernels) == 40
    assert sum(get_program(k.ast, Device["CPU"].renderer).estimates.ops for k in kernels) == 29_851_095


def test_conv_forward_backward_kernels_are_pinned() -> None:
    """bench/ops.py's conv2d fwd+bwd (8x64x56x56, 3x3, pad 1): 4 kernels, the output, the input gradient, the weight
    gradient's per-image partials and their sum, which stores straight into the weight gradient's buffer. With the
    gradients accumulating (a second backward without zero_grad) still 4, both sums adding in place: the weight
    gradient, a RESHAPE(RESHAPE(BUFFER)) view, was computed into a fresh buffer and copied in by a fifth kernel, its
    own view chain counted as a read of its buffer through another view (kernelize._reads_target_elsewhere)."""
    from fusegrad.uop import Ops
    from test.shared import count_kernels

    x, g = Tensor.empty(8, 64, 56, 56, requires_grad=True), Tensor.empty(8, 64, 56, 56)
    w = Tensor.empty(64, 64, 3, 3, requires_grad=True)
    out = x.conv2d(w, padding=1)
    (out * g).sum().backward()
    assert x.grad is not None
    assert w.grad is not None
    assert count_kernels(out, x.grad, w.grad) == 4
    x.grad = Tensor.empty(8, 64, 56, 56).realize()
    w.grad = Tensor.empty(1, 1, 64, 1, 1, 64, 3, 3).realize().reshape(64, 64, 3, 3)  # as the first backward left it
    buffer = w.grad.uop.base.buffer
    out = x.conv2d(w, padding=1)
    (out * g).sum().backward()
    kernels = [item for item in Tensor.schedule(out, x.grad, w.grad) if item.ast.op is Ops.SINK]
    assert len(kernels) == 4
    assert kernels[-1].bufs[0] is buffer
