"""The tile functions and kernels of the SSD forward (``ssd.py`` launches them).

Importing this module needs cuda.tile; ``kernels.mamba2.ssd`` imports it on first use.
"""
import cuda.tile as ct

C_ = ct.Constant
ZERO = ct.PaddingMode.ZERO


# ---- tile functions: one per piece of arithmetic --------------------------------------
def hint(latency: C_[int]):
    """A load's or store's ``latency=`` hint from a kernel's Constant: 0 means none (the compiler
    infers it), 1 (low) to 10 (high DRAM traffic) are passed on."""
    return latency if latency > 0 else None


def step_sizes(dt, dt_bias, A, dts, cums, bi, hb, c, seqlen, Q: C_[int], HB: C_[int], HAS_BIAS: C_[bool],
               SOFTPLUS: C_[bool]):
    """Stage 1 for one chunk of HB heads: dt after bias and softplus (0 past the end of the
    sequence, so padded steps neither decay nor add) and its running sum times A, stored
    (b, h, chunk, l) for the stages that read them."""
    d = ct.load(dt, (bi, c, hb), shape=(1, Q, HB), padding_mode=ZERO).reshape((Q, HB)).astype(ct.float32)
    if HAS_BIAS:
        d = d + ct.load(dt_bias, (hb,), shape=(HB,)).astype(ct.float32)[None, :]
    if SOFTPLUS:
        d = ct.where(d > 20.0, d, ct.log(1.0 + ct.exp(d)))
    t = c * Q + ct.arange(Q, dtype=ct.int32)
    d = ct.where(t[:, None] < seqlen, d, 0.0)
    a = ct.load(A, (hb,), shape=(HB,)).astype(ct.float32)
    cs = ct.cumsum(d * a[None, :], axis=0)
    ct.store(dts, (bi, hb, c, 0), d.transpose().reshape((1, HB, 1, Q)))
    ct.store(cums, (bi, hb, c, 0), cs.transpose().reshape((1, HB, 1, Q)))


def chunk_inputs(x, B, dts, cums, bi, hi, gi, c, pt, nt, Q: C_[int], BP: C_[int], BN: C_[int], LX: C_[int],
                 LB: C_[int], LD: C_[int]):
    """What stage 2 reads for one chunk and one (BP x BN) tile of the state: the step sizes,
    their running sum and its last value (the chunk's log-decay), and the chunk's x and B.
    LX, LB and LD are cuTile's load-latency hints (``latency=``, 1 low to 10 high DRAM traffic;
    0: none, the compiler infers it) for x, for B, and for the step sizes and their sum."""
    d = ct.load(dts, (bi, hi, c, 0), shape=(1, 1, 1, Q), latency=hint(LD)).reshape((Q,))
    cs = ct.load(cums, (bi, hi, c, 0), shape=(1, 1, 1, Q), latency=hint(LD)).reshape((Q,))
    last = ct.extract(cs, index=(Q - 1,), shape=(1,))
    xc = ct.load(x, (bi, c, hi, pt), shape=(1, Q, 1, BP), padding_mode=ZERO,
                 latency=hint(LX)).reshape((Q, BP))
    bc = ct.load(B, (bi, c, gi, nt), shape=(1, Q, 1, BN), padding_mode=ZERO,
                 latency=hint(LB)).reshape((Q, BN))
    return d, cs, last, xc, bc


def chunk_state(x, B, dts, cums, h, bi, hi, gi, c, pt, nt, Q: C_[int], BP: C_[int], BN: C_[int], LX: C_[int],
                LB: C_[int], LD: C_[int]):
    """Stage 2 for one chunk and one (BP x BN) tile of the state, added to the state ``h``
    entering the chunk decayed over it (stage 3's step; zeros for stage 2 alone):
    exp(cs_last) h + sum_t exp(cs_last - cs_t) dt_t x_t B_t^T."""
    d, cs, last, xc, bc = chunk_inputs(x, B, dts, cums, bi, hi, gi, c, pt, nt, Q, BP, BN, LX, LB, LD)
    w = ct.exp(last - cs) * d
    bw = (bc.astype(ct.float32) * w[:, None]).astype(xc.dtype)
    return ct.mma(xc.transpose(), bw, h * ct.exp(last))


def initial_state(init, bi, hi, pt, nt, BP: C_[int], BN: C_[int], HAS_INIT: C_[bool]):
    """The (BP x BN) tile of the state entering the sequence, in fp32 (zeros without one)."""
    h = ct.zeros((BP, BN), dtype=ct.float32)
    if HAS_INIT:
        h = ct.load(init, (bi, hi, pt, nt), shape=(1, 1, BP, BN)).reshape((BP, BN)).astype(ct.float32)
    return h


def store_state(states, h, bi, c, hi, pt, nt, BP: C_[int], BN: C_[int], LS: C_[int]):
    """Store one (BP x BN) state tile (LS: the store's latency hint, 0 none)."""
    ct.store(states, (bi, c, hi, pt, nt), h.reshape((1, 1, 1, BP, BN)).astype(states.dtype),
             latency=hint(LS))


def cb_tile(C, B, cb, bi, c, gi, mt, kt, Q: C_[int], BM: C_[int], NS: C_[int]):
    """Stage 4 for one (BM x BM) tile of C B^T in one chunk (the decay mask is causal:
    callers skip tiles above the diagonal, which are never read)."""
    r = Q // BM
    cm = ct.load(C, (bi, c * r + mt, gi, 0), shape=(1, BM, 1, NS), padding_mode=ZERO).reshape((BM, NS))
    bk = ct.load(B, (bi, c * r + kt, gi, 0), shape=(1, BM, 1, NS), padding_mode=ZERO).reshape((BM, NS))
    acc = ct.mma(cm, bk.transpose(), ct.zeros((BM, BM), dtype=ct.float32))
    ct.store(cb, (bi, c, gi, mt, kt), acc.reshape((1, 1, 1, BM, BM)).astype(cb.dtype))


# ---- staged: one kernel per stage ------------------------------------------------------
@ct.kernel
def cumsum_kernel(dt, dt_bias, A, dts, cums, seqlen, Q: C_[int], HB: C_[int], HAS_BIAS: C_[bool],
                  SOFTPLUS: C_[bool]):
    bi, c, hb = ct.bid(0), ct.bid(1), ct.bid(2)
    step_sizes(dt, dt_bias, A, dts, cums, bi, hb, c, seqlen, Q, HB, HAS_BIAS, SOFTPLUS)


@ct.kernel
def chunk_state_kernel(x, B, dts, cums, states, nchunks, nheads: C_[int], heads_per_group: C_[int],
                       Q: C_[int], BP: C_[int], BN: C_[int]):
    pid, pt, nt = ct.bid(0), ct.bid(1), ct.bid(2)
    hi = pid % nheads
    c = (pid // nheads) % nchunks
    bi = pid // (nheads * nchunks)
    s = chunk_state(x, B, dts, cums, ct.zeros((BP, BN), dtype=ct.float32), bi, hi, hi // heads_per_group, c,
                    pt, nt, Q, BP, BN, 0, 0, 0)
    store_state(states, s, bi, c, hi, pt, nt, BP, BN, 0)


@ct.kernel
def state_passing_kernel(states, cums, init, entering, final, nchunks, nheads: C_[int], Q: C_[int],
                         BP: C_[int], BN: C_[int], HAS_INIT: C_[bool]):
    bh, pt, nt = ct.bid(0), ct.bid(1), ct.bid(2)
    bi, hi = bh // nheads, bh % nheads
    h = initial_state(init, bi, hi, pt, nt, BP, BN, HAS_INIT)
    for c in range(nchunks):
        store_state(entering, h, bi, c, hi, pt, nt, BP, BN, 0)
        last = ct.load(cums, (bi, hi, c, Q - 1), shape=())
        s = ct.load(states, (bi, c, hi, pt, nt), shape=(1, 1, 1, BP, BN)).reshape((BP, BN))
        h = h * ct.exp(last) + s
    ct.store(final, (bi, hi, pt, nt), h.reshape((1, 1, BP, BN)))


@ct.kernel
def bmm_kernel(C, B, cb, nchunks, ngroups: C_[int], Q: C_[int], BM: C_[int], NS: C_[int]):
    pid, mt, kt = ct.bid(0), ct.bid(1), ct.bid(2)
    if kt <= mt:
        cb_tile(C, B, cb, pid // (ngroups * nchunks), (pid // ngroups) % nchunks, pid % ngroups, mt, kt, Q, BM, NS)


# ---- fused: three kernels ----------------------------------------------------------------
@ct.kernel
def prep_kernel(dt, dt_bias, A, dts, cums, C, B, cb, seqlen, nchunks, head_blocks: C_[int], ngroups: C_[int],
                Q: C_[int], HB: C_[int], BM: C_[int], NS: C_[int], HAS_BIAS: C_[bool], SOFTPLUS: C_[bool]):
    """Stages 1 and 4 in one launch: both read only dt or B and C, and both are small. Blocks
    (b * chunk, j): j < head_blocks runs stage 1 for heads [j HB, (j + 1) HB), the others a
    tile of C B^T."""
    bc, j = ct.bid(0), ct.bid(1)
    bi, c = bc // nchunks, bc % nchunks
    if j < head_blocks:
        step_sizes(dt, dt_bias, A, dts, cums, bi, j, c, seqlen, Q, HB, HAS_BIAS, SOFTPLUS)
    else:
        r = Q // BM
        t = j - head_blocks
        mt, kt = (t // r) % r, t % r
        if kt <= mt:
            cb_tile(C, B, cb, bi, c, t // (r * r), mt, kt, Q, BM, NS)


@ct.kernel
def state_kernel(x, B, init, dts, cums, entering, final, nchunks, nheads: C_[int], heads_per_group: C_[int],
                 Q: C_[int], BP: C_[int], BN: C_[int], HAS_INIT: C_[bool], LX: C_[int], LB: C_[int], LD: C_[int],
                 LS: C_[int]):
    """Stages 2 and 3 in one loop over the chunks: a block carries one (BP x BN) tile of one
    head's state through the sequence; chunk states never leave the registers, and only the
    state entering each chunk is stored (for stage 5). LX, LB, LD and LS: latency hints of the
    loads of x, of B, of the step sizes and of the stored states (``chunk_inputs``)."""
    bh, pt, nt = ct.bid(0), ct.bid(1), ct.bid(2)
    bi, hi = bh // nheads, bh % nheads
    h = initial_state(init, bi, hi, pt, nt, BP, BN, HAS_INIT)
    for c in range(nchunks):
        store_state(entering, h, bi, c, hi, pt, nt, BP, BN, LS)
        h = chunk_state(x, B, dts, cums, h, bi, hi, hi // heads_per_group, c, pt, nt, Q, BP, BN, LX, LB, LD)
    ct.store(final, (bi, hi, pt, nt), h.reshape((1, 1, BP, BN)))


# ---- one kernel: the state never leaves the chip -------------------------------------------
@ct.kernel
def scan_kernel(x, dt, dt_bias, A, B, C, D, init, dts, cums, cb, out, final, seqlen, nchunks, nseg, seg_len,
                nheads: C_[int], heads_per_group: C_[int], T: C_[int], BP: C_[int], NS: C_[int], HAS_BIAS: C_[bool],
                SOFTPLUS: C_[bool], HAS_D: C_[bool], HAS_INIT: C_[bool], PRE_CS: C_[bool], PRE_CB: C_[bool],
                SEGMENTED: C_[bool]):
    """All five stages in one loop over blocks of T steps: a block carries the transposed state
    (NS x BP, fp32) of one head through the sequence or, with SEGMENTED, through its segment of
    it (blocks [s seg_len, (s + 1) seg_len) for segment s = bid(2)), starting from the state
    entering it (init, viewed as (b nseg, h, p, n) when segmented). Per block of steps it
    computes the step sizes and their cumulative sum (stage 1), C B^T (stage 4), the output from
    the entering state and from inside the block (stage 5), then adds the block's contribution
    to the decayed state (stages 2 and 3). Nothing but out and the final state (by the last
    segment) is written. Unsegmented, the machine code is that of the kernel before segments."""
    bh, pt = ct.bid(0), ct.bid(1)
    bi, hi = bh // nheads, bh % nheads
    gi = hi // heads_per_group
    a = ct.load(A, (hi,), shape=()).astype(ct.float32)
    first, stop, entering = 0, nchunks, bi
    if SEGMENTED:
        sg = ct.bid(2)
        first, stop, entering = sg * seg_len, ct.minimum(nchunks, (sg + 1) * seg_len), bi * nseg + sg
    hT = initial_state(init, entering, hi, pt, 0, BP, NS, HAS_INIT).transpose()
    rows = ct.arange(T, dtype=ct.int32)
    for c in range(first, stop):
        if PRE_CS:  # stage 1 done by the prep kernel
            d = ct.load(dts, (bi, hi, c, 0), shape=(1, 1, 1, T)).reshape((T,))
            cs = ct.load(cums, (bi, hi, c, 0), shape=(1, 1, 1, T)).reshape((T,))
        else:
            d = ct.load(dt, (bi, c, hi), shape=(1, T, 1), padding_mode=ZERO).reshape((T,)).astype(ct.float32)
            if HAS_BIAS:
                d = d + ct.load(dt_bias, (hi,), shape=()).astype(ct.float32)
            if SOFTPLUS:
                d = ct.where(d > 20.0, d, ct.log(1.0 + ct.exp(d)))
            d = ct.where(c * T + rows < seqlen, d, 0.0)
            cs = ct.cumsum(d * a, axis=0)
        last = ct.extract(cs, index=(T - 1,), shape=(1,))
        xc = ct.load(x, (bi, c, hi, pt), shape=(1, T, 1, BP), padding_mode=ZERO).reshape((T, BP))
        bc = ct.load(B, (bi, c, gi, 0), shape=(1, T, 1, NS), padding_mode=ZERO).reshape((T, NS))
        cc = ct.load(C, (bi, c, gi, 0), shape=(1, T, 1, NS), padding_mode=ZERO).reshape((T, NS))
        # out from the entering state: exp(cs_i) * (C_i . state)
        acc = ct.mma(cc, hT.astype(cc.dtype), ct.zeros((T, BP), dtype=ct.float32)) * ct.exp(cs)[:, None]
        # out from inside the block: (C B^T o decay o dt) x, causal
        if PRE_CB:  # stage 4 done by the prep kernel
            s = ct.load(cb, (bi, c, gi, 0, 0), shape=(1, 1, 1, T, T)).reshape((T, T)).astype(ct.float32)
        else:
            s = ct.mma(cc, bc.transpose(), ct.zeros((T, T), dtype=ct.float32))
        s = ct.where(rows[:, None] >= rows[None, :], s * ct.exp(cs[:, None] - cs[None, :]) * d[None, :], 0.0)
        acc = ct.mma(s.astype(xc.dtype), xc, acc)
        if HAS_D:
            acc = acc + ct.load(D, (hi,), shape=()).astype(ct.float32) * xc.astype(ct.float32)
        ct.store(out, (bi, c, hi, pt), acc.reshape((1, T, 1, BP)).astype(out.dtype))
        # the state leaving the block: exp(cs_last) state + sum_t exp(cs_last - cs_t) dt_t B_t x_t^T
        bw = (bc.astype(ct.float32) * (ct.exp(last - cs) * d)[:, None]).astype(xc.dtype)
        hT = ct.mma(bw.transpose(), xc, hT * ct.exp(last))
    if SEGMENTED:
        if ct.bid(2) == nseg - 1:
            ct.store(final, (bi, hi, pt, 0), hT.transpose().reshape((1, 1, BP, NS)))
    else:
        ct.store(final, (bi, hi, pt, 0), hT.transpose().reshape((1, 1, BP, NS)))


@ct.kernel
def segment_state_kernel(x, B, dts, cums, seg_states, seg_decay, nchunks, nseg, seg_len, nheads: C_[int],
                         heads_per_group: C_[int], Q: C_[int], BP: C_[int], BN: C_[int]):
    """Stages 2 and 3 over one segment of seg_len chunks, from a zero state: the segment's own
    contribution to the state leaving it, sum_t exp(cs_end - cs_t) dt_t x_t B_t^T, and (as a
    (b, h, nseg, 1) array, the layout the state-passing kernel reads) the segment's log-decay
    cs_end. The chunks are walked from the last: each weight carries the decay of the chunks
    after its own as one scalar, so the accumulator only ever receives products (a GEMM over
    the segment's steps, no rescaling between them, unlike the forward recurrence of
    ``chunk_state``). The state-passing kernel then chains the segments."""
    pid, pt, nt = ct.bid(0), ct.bid(1), ct.bid(2)
    hi = pid % nheads
    sg = (pid // nheads) % nseg
    bi = pid // (nheads * nseg)
    gi = hi // heads_per_group
    stop = ct.minimum(nchunks, (sg + 1) * seg_len)
    acc = ct.zeros((BP, BN), dtype=ct.float32)
    after = ct.zeros((1,), dtype=ct.float32)  # log-decay of the segment's chunks after this one
    for j in range(stop - sg * seg_len):
        c = stop - 1 - j
        d, cs, last, xc, bc = chunk_inputs(x, B, dts, cums, bi, hi, gi, c, pt, nt, Q, BP, BN, 0, 0, 0)
        w = ct.exp(last + after - cs) * d
        acc = ct.mma(xc.transpose(), (bc.astype(ct.float32) * w[:, None]).astype(xc.dtype), acc)
        after = after + last
    store_state(seg_states, acc, bi, sg, hi, pt, nt, BP, BN, 0)
    ct.store(seg_decay, (bi, hi, sg, 0), after.reshape((1, 1, 1, 1)))


# ---- stage 5, shared by both versions ------------------------------------------------------
@ct.kernel
def chunk_scan_kernel(x, C, cb, dts, cums, entering, D, out, nchunks, nheads: C_[int],
                      heads_per_group: C_[int], Q: C_[int], BM: C_[int], P: C_[int], NS: C_[int],
                      HAS_D: C_[bool]):
    pid, mt = ct.bid(0), ct.bid(1)
    hi = pid % nheads
    c = (pid // nheads) % nchunks
    bi = pid // (nheads * nchunks)
    gi = hi // heads_per_group
    r = Q // BM
    # from the state entering the chunk: exp(cs_i) * (C_i . state)
    cs_m = ct.load(cums, (bi, hi, c, mt), shape=(1, 1, 1, BM)).reshape((BM,))
    cm = ct.load(C, (bi, c * r + mt, gi, 0), shape=(1, BM, 1, NS), padding_mode=ZERO).reshape((BM, NS))
    st = ct.load(entering, (bi, c, hi, 0, 0), shape=(1, 1, 1, P, NS)).reshape((P, NS))
    acc = ct.mma(cm, st.transpose().astype(cm.dtype), ct.zeros((BM, P), dtype=ct.float32))
    acc = acc * ct.exp(cs_m)[:, None]
    # from inside the chunk: sum over key tiles kt <= mt of (CB o decay o dt) x
    rows = mt * BM + ct.arange(BM, dtype=ct.int32)
    # and D x, in fp32, from the x tile of the diagonal (kt = mt, the loop's last), which is
    # therefore not loaded again (a D of 0 for the other tiles; TUNING.md#mamba2-chunk-scan-d).
    for kt in range(mt + 1):
        cs_k = ct.load(cums, (bi, hi, c, kt), shape=(1, 1, 1, BM)).reshape((BM,))
        d_k = ct.load(dts, (bi, hi, c, kt), shape=(1, 1, 1, BM)).reshape((BM,))
        s = ct.load(cb, (bi, c, gi, mt, kt), shape=(1, 1, 1, BM, BM)).reshape((BM, BM)).astype(ct.float32)
        cols = kt * BM + ct.arange(BM, dtype=ct.int32)
        s = ct.where(rows[:, None] >= cols[None, :], s * ct.exp(cs_m[:, None] - cs_k[None, :]) * d_k[None, :], 0.0)
        xk = ct.load(x, (bi, c * r + kt, hi, 0), shape=(1, BM, 1, P), padding_mode=ZERO).reshape((BM, P))
        acc = ct.mma(s.astype(xk.dtype), xk, acc)
        if HAS_D:
            dm = ct.where(kt == mt, ct.load(D, (hi,), shape=()).astype(ct.float32), 0.0)
            acc = acc + dm * xk.astype(ct.float32)
    ct.store(out, (bi, c * r + mt, hi, 0), acc.reshape((1, BM, 1, P)).astype(out.dtype))


KERNELS = dict(cumsum=cumsum_kernel, chunk_state=chunk_state_kernel, state_passing=state_passing_kernel,
               bmm=bmm_kernel, prep=prep_kernel, scan=scan_kernel, segment_state=segment_state_kernel,
               state=state_kernel, chunk_scan=chunk_scan_kernel)
