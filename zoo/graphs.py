"""A group's work on one batch, replayed from one CUDA graph per batch shape: the machinery that the training
step (``zoo.step.TrainStep``) and the test-metrics pass (``zoo.evaluation.EvalPass``) share.

A group is G member models that see the same batch (the runs of one sweep cell that differ only in learning
rate). Tiny models leave the GPU idle behind Python: one member's forward (and backward) is a few hundred small
kernels whose launches cost more than their work. On CUDA, ``GroupCall`` records the work of every active member
once per batch shape into one CUDA graph, each member on its own stream inside the graph (fork, then join), so a
replay costs one launch and the members' kernels run side by side on the GPU. The graph reads its batch from
static buffers; what a member computes must land in tensors that outlive the call (parameters updated in place,
preallocated outputs). When a member stops (early stop, divergence) the graphs are dropped and recorded again for
the members still active. On CPU (or with ``graphs=False``) the members run one after the other, eagerly.

Shapes: inputs (B, N) int64; positions, targets (B, K) int64.
"""
from __future__ import annotations

import contextlib

import torch

WARMUP_CALLS = 3  # eager calls per new shape before recording (lets cuBLAS/cuDNN pick and allocate)


class GroupCall:
    """``run(inputs, positions, targets)`` calls ``member_call`` for every active member: eagerly, or on CUDA with
    ``graphs`` by replaying the graph recorded for this batch shape. Subclasses define ``member_call``, and
    ``doing``, which names their work in messages."""

    doing = "running"

    def __init__(self, members: list, graphs: bool):
        self.members, self.graphs = members, graphs
        self.active = [True] * len(members)
        self.recorded: dict[tuple, tuple] = {}  # (shape, active members) -> (graph, static inputs)
        self.seen: dict[tuple, int] = {}
        self.pool = None
        # The caching allocator reuses a freed block only on the stream that allocated it, so warm-up calls and
        # captures on a fresh stream each time (PyTorch hands out up to 32 in turn) reserve a call's memory per
        # stream. Seen on an H100 (MQAR N=128, d=512, groups of 4, three workers): one worker held 32 GiB reserved
        # but unallocated while the others ran out of memory. So each GroupCall keeps one side stream (warm-ups,
        # captures) and one stream per member.
        self.side_stream = None
        self.member_streams: list | None = None

    def member_call(self, i: int, inputs, positions, targets) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def eager_member_call(self, i: int, inputs, positions, targets) -> None:
        """Member ``i``'s work outside a graph (a subclass may wrap it, e.g. in the member's random stream)."""
        self.member_call(i, inputs, positions, targets)

    def deactivate(self, index: int) -> None:
        """Stop calling member ``index``; graphs are recorded anew."""
        if self.active[index]:
            self.active[index] = False
            recorded = bool(self.recorded)
            self._drop_graphs()
            if recorded:  # the dropped graphs' pool is only cache now: give it back to the GPU's other workers
                torch.cuda.empty_cache()

    def _drop_graphs(self) -> None:
        """Forget every graph and their memory pool: the pool dies with its last graph, and recording into a
        dead pool fails (PyTorch 2.11: ``use_count > 0 INTERNAL ASSERT FAILED`` in CUDACachingAllocator)."""
        self.recorded.clear()
        self.seen.clear()
        self.pool = None

    def _eager(self, inputs, positions, targets) -> None:
        for i, on in enumerate(self.active):
            if on:
                self.eager_member_call(i, inputs, positions, targets)

    def _forked(self, inputs, positions, targets) -> None:
        """Every active member on its own stream, joined back into the current one (for graph capture)."""
        main = torch.cuda.current_stream()
        if self.member_streams is None:
            self.member_streams = [torch.cuda.Stream() for _ in self.members]
        streams = []
        for i, on in enumerate(self.active):
            if on:
                stream = self.member_streams[i]
                stream.wait_stream(main)
                with torch.cuda.stream(stream):
                    self.member_call(i, inputs, positions, targets)
                streams.append(stream)
        for stream in streams:
            main.wait_stream(stream)

    def _side(self):
        """The side stream of warm-up calls and captures, one for the life of this GroupCall."""
        if self.side_stream is None:
            self.side_stream = torch.cuda.Stream()
        return self.side_stream

    def _record(self, key, inputs, positions, targets):
        """Capture the call into a new graph, as ``torch.cuda.graph`` does but without its ``empty_cache()``:
        emptying the cache after the first graph was recorded made that graph's replays crash (SIGSEGV, or an
        illegal address in its kernels) on an H100 with torch 2.11, in groups of 2+ members that record a second
        batch shape; ``results/graph_replay_crash.md`` has the experiments."""
        static = tuple(static_copy(t) for t in (inputs, positions, targets))
        graph = torch.cuda.CUDAGraph()
        capture = self._side()  # capture cannot run on the default stream
        capture.wait_stream(torch.cuda.current_stream())
        torch.cuda.synchronize()
        with torch.cuda.stream(capture):
            graph.capture_begin(*(() if self.pool is None else (self.pool,)))
            try:
                self._forked(*static)
            except BaseException:
                # the members' streams were never joined, so ending the capture fails too ("capturing stream has
                # unjoined work"); it must still end, and the error worth reporting is the member's
                with contextlib.suppress(RuntimeError):
                    graph.capture_end()
                raise
            graph.capture_end()
        torch.cuda.current_stream().wait_stream(capture)
        self.pool = graph.pool()
        self.recorded[key] = (graph, static)

    def run(self, inputs, positions, targets) -> None:
        if not (self.graphs and inputs.is_cuda):
            self._eager(inputs, positions, targets)
            return
        key = (tuple(inputs.shape), tuple(positions.shape), tuple(self.active))
        if key not in self.recorded:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] <= WARMUP_CALLS:  # on a side stream, as graph capture requires
                side = self._side()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._eager(inputs, positions, targets)
                torch.cuda.current_stream().wait_stream(side)
                return
            try:
                self._record(key, inputs, positions, targets)
                failure = None
            except RuntimeError as err:  # a mixer that syncs with the host or allocates per call, or memory
                failure = str(err).splitlines()[0]
            if failure is not None:
                # outside the except clause, whose error holds the failed capture's frames (and their tensors) alive:
                # a capture can run out of memory where eager calls do not (the members' streams cannot share memory
                # inside a graph, so a group's graph needs several times the memory of its eager calls)
                print(f"zoo: CUDA graph capture failed, {self.doing} eagerly ({failure})")
                self.graphs = False
                self._drop_graphs()
                # no empty_cache here: the other GroupCall's graphs may replay on (results/graph_replay_crash.md)
                torch.cuda.synchronize()
                _release_generator_from_capture(inputs.device)
                self._eager(inputs, positions, targets)
                return
        graph, static = self.recorded[key]
        for buffer, value in zip(static, (inputs, positions, targets)):
            buffer.copy_(value)
        graph.replay()


def static_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its strides (a graph's input buffer). A compiled forward guards on its inputs' strides:
    test batches' positions are row slices of a [n, N] sort's [:, :K] view (strides (N, 1)), and a contiguous
    buffer made torch.compile compile anew inside the capture, where Inductor fails (H100, torch 2.11:
    "Cannot copy between CPU and CUDA tensors during CUDA graph capture")."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _release_generator_from_capture(device: torch.device) -> None:
    """A capture that failed half-way leaves the device's random generator marked as capturing, and every
    later random op outside a graph (dropout) raises "Offset increment outside graph capture encountered
    unexpectedly". A fresh copy of its state (same seed and offset, not capturing) lets eager calls go on."""
    generator = torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    generator.graphsafe_set_state(generator.clone_state())
