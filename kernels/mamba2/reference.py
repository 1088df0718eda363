"""Float64 references for Mamba-2's SSD forward pass: the recurrence and the chunked algorithm.

The layer (Dao & Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms
Through Structured State Space Duality", ICML 2024, arXiv:2405.21060) runs, for every batch
row and head, a linear recurrence with a scalar decay per step:

    dt_t    = softplus(dt_t + dt_bias)          (bias and softplus optional)
    state_t = exp(dt_t * A) * state_{t-1} + dt_t * outer(x_t, B_t)     state: (p, n)
    y_t     = state_t @ C_t + D * x_t                                   y_t: (p,)

``ssd_sequential`` computes exactly that, one step at a time: the ground truth. The same map is
a masked matrix product, y = (L o C B^T) (dt x) with L_ij = exp(cumsum_i - cumsum_j) for j <= i
(the "duality"), and the chunked algorithm of the paper (section 6) and of Tri Dao's blog
("State Space Duality (Mamba-2) Part III - The Algorithm",
https://tridao.me/blog/2024/mamba2-part3-algorithm/) splits the sequence into chunks of length
l: the quadratic (attention-like) form inside a chunk, the recurrence across chunks.
``ssd_reference`` writes it as the five stages a GPU implementation runs as kernels:

    1. chunk_cumsum   dA_cumsum = cumsum of dt * A within each chunk
    2. chunk_state    each chunk's final state from a zero initial state
    3. state_passing  a scan over chunks: the state entering each chunk, and the final state
    4. bmm_chunk      C B^T within each chunk, one (l, l) matrix per group
    5. chunk_scan     out = (CB o decay o dt) @ x  +  exp(dA_cumsum) * (C @ state entering)  +  D x

The causal decay mask exp(cumsum_i - cumsum_j) is applied in stage 5, not 4: it is per head,
while C B^T is per group, so stage 4 writes h/g times fewer (l, l) matrices.

Contract (that of mamba_ssm's ``mamba_chunk_scan_combined``; this code is ours):
x (b, L, h, p), dt (b, L, h), A (h), B and C (b, L, g, n) with g dividing h and head i reading
group i // (h // g), D (h) or None, initial_states (b, h, p, n) or None, dt_bias (h) or None.
Returns out (b, L, h, p) in x's dtype, and with ``return_final_states`` also the final states
(b, h, p, n) in float64, the computation dtype. L need not be a multiple of the chunk size: the
last chunk is padded with dt = 0 after the bias and softplus, so a padded step neither decays
the state nor adds to it, and the final state is the state after step L.

Letters used below: b batch, L length, h heads, p head dim, g groups, n state dim, l chunk
size, c = ceil(L / l) chunks, r = h / g heads per group. The FLOP counts take a multiply-add as
2 and an exp as 1. The byte counts are those of a GPU implementation that runs each stage as
one kernel: inputs at e bytes an element, intermediates (dt, dA_cumsum, states, CB) in fp32;
they ignore A, D and dt_bias (h values each).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

FP32 = 4  # bytes of an fp32 intermediate or final state


# ----------------------------------------------------------------------------- checks, helpers

def check_shapes(x, dt, A, B, C, D, initial_states, dt_bias) -> tuple[int, int, int, int, int, int]:
    """Raise ValueError unless the shapes follow the contract; return (b, L, h, p, g, n)."""
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, seqlen, nheads, headdim), got {tuple(x.shape)}")
    b, L, h, p = x.shape
    if B.dim() != 4 or B.shape[:2] != (b, L):
        raise ValueError(f"B must have shape ({b}, {L}, ngroups, dstate), got {tuple(B.shape)}")
    g, n = B.shape[2:]
    if g < 1 or h % g:
        raise ValueError(f"the number of groups g = {g} must divide the number of heads h = {h}")
    expected = {"C": (C, (b, L, g, n)), "dt": (dt, (b, L, h)), "A": (A, (h,)), "D": (D, (h,)),
                "initial_states": (initial_states, (b, h, p, n)), "dt_bias": (dt_bias, (h,))}
    for name, (t, shape) in expected.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    return b, L, h, p, g, n


def _f64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(torch.float64)


def _dt_eff(dt: torch.Tensor, dt_bias: torch.Tensor | None, dt_softplus: bool) -> torch.Tensor:
    """dt + dt_bias, then softplus if asked: the step size both algorithms use."""
    if dt_bias is not None:
        dt = dt + dt_bias
    return F.softplus(dt) if dt_softplus else dt


def _heads(t: torch.Tensor, h: int, dim: int) -> torch.Tensor:
    """Repeat each group h / g times along ``dim`` so that head i sees group i // (h / g)."""
    return t.repeat_interleave(h // t.shape[dim], dim=dim)


def _chunked(t: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """(b, L, ...) -> (b, c, l, ...), the last chunk padded with zeros."""
    pad = -t.shape[1] % chunk_size
    if pad:
        t = torch.cat([t, t.new_zeros(t.shape[0], pad, *t.shape[2:])], dim=1)
    return t.view(t.shape[0], t.shape[1] // chunk_size, chunk_size, *t.shape[2:])


# ----------------------------------------------------------------------------- ground truth

def ssd_sequential(x, dt, A, B, C, D=None, initial_states=None, dt_bias=None, dt_softplus=False,
                   return_final_states=False):
    """The recurrence step by step in float64, vectorized over (b, h, p, n): the ground truth.

    Same arguments and results as ``ssd_reference`` less ``chunk_size``.
    """
    b, L, h, p, g, n = check_shapes(x, dt, A, B, C, D, initial_states, dt_bias)
    dt = _dt_eff(_f64(dt), _f64(dt_bias), dt_softplus)                 # (b, L, h)
    x64, A, D = _f64(x), _f64(A), _f64(D)
    group = torch.arange(h, device=x.device) // (h // g)              # head i reads group i // (h / g)
    B, C = _f64(B)[:, :, group], _f64(C)[:, :, group]                 # (b, L, h, n)
    state = _f64(initial_states) if initial_states is not None else x64.new_zeros(b, h, p, n)
    out = x64.new_empty(b, L, h, p)
    for t in range(L):
        decay = torch.exp(dt[:, t] * A)[..., None, None]              # (b, h, 1, 1)
        state = decay * state + (dt[:, t, :, None] * x64[:, t])[..., None] * B[:, t, :, None, :]
        out[:, t] = torch.einsum("bhpn,bhn->bhp", state, C[:, t])
        if D is not None:
            out[:, t] += D[:, None] * x64[:, t]
    out = out.to(x.dtype)
    return (out, state) if return_final_states else out


# ----------------------------------------------------------------------------- the five stages

def chunk_cumsum(dt: torch.Tensor, A: torch.Tensor, chunk_size: int, dt_bias: torch.Tensor | None = None,
                 dt_softplus: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1: the step sizes and the running sum of dt * A within each chunk.

    dt (b, L, h), A (h), dt_bias (h) or None -> dt_eff (b, h, c, l), dA_cumsum (b, h, c, l),
    where dt_eff = softplus(dt + dt_bias) (as asked), zero-padded to c * l steps, and
    dA_cumsum[..., k, i] = sum_{j <= i} dt_eff[..., k, j] * A.

    FLOPs: 2 b L h (a multiply and an add per step; the bias and softplus are not counted).
    Bytes: read dt e b L h, write dt_eff and dA_cumsum 2 * 4 b L h.
    """
    dt = _chunked(_dt_eff(dt, dt_bias, dt_softplus), chunk_size).permute(0, 3, 1, 2)  # (b, h, c, l)
    return dt, torch.cumsum(dt * A[:, None, None], dim=-1)


def chunk_state(B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor) -> torch.Tensor:
    """Stage 2: each chunk's final state, as if the chunk started from a zero state.

    B (b, c, l, g, n), x (b, c, l, h, p), dt and dA_cumsum (b, h, c, l) -> states (b, c, h, p, n):
    states[k] = sum_j exp(dA_cumsum[k, -1] - dA_cumsum[k, j]) dt[k, j] outer(x[k, j], B[k, j]).

    FLOPs: 2 b L h p n (the sum over j, a GEMM of (p, l) by (l, n) per chunk and head)
           + b L h (p + 3) (decay weights, then x scaled by them).
    Bytes: read x e b L h p, B e b L g n, dt and dA_cumsum 2 * 4 b L h; write states 4 b c h p n.
    """
    h = x.shape[3]
    weight = torch.exp(dA_cumsum[..., -1:] - dA_cumsum) * dt           # (b, h, c, l)
    return torch.einsum("bclhn,bhcl,bclhp->bchpn", _heads(B, h, 3), weight, x)


def state_passing(states: torch.Tensor, dA_cumsum: torch.Tensor,
                  initial_states: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 3: a scan over the chunks, carrying the state from one chunk to the next.

    states (b, c, h, p, n), dA_cumsum (b, h, c, l), initial_states (b, h, p, n) or None ->
    prev_states (b, c, h, p, n), the state entering each chunk, and final_states (b, h, p, n):
    s_0 = initial_states (or 0), s_{k+1} = exp(dA_cumsum[k, -1]) s_k + states[k].

    FLOPs: b c h (2 p n + 1).
    Bytes: read states 4 b c h p n, the chunk ends of dA_cumsum 4 b h c, initial_states
    4 b h p n (if given); write prev_states 4 b c h p n and final_states 4 b h p n.
    """
    chunk_decay = torch.exp(dA_cumsum[..., -1])                        # (b, h, c)
    s = initial_states if initial_states is not None else states.new_zeros(states[:, 0].shape)
    prev = []
    for k in range(states.shape[1]):
        prev.append(s)
        s = chunk_decay[:, :, k, None, None] * s + states[:, k]
    return (torch.stack(prev, dim=1) if prev else torch.zeros_like(states)), s


def bmm_chunk(C: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Stage 4: C B^T within each chunk, per group (the decay mask waits for stage 5).

    C and B (b, c, l, g, n) -> CB (b, c, g, l, l), CB[..., i, j] = C_i . B_j. Only j <= i is
    used later; this reference computes the whole square.

    FLOPs: 2 b L g l n (the square; a kernel that skips the j > i half does about half).
    Bytes: read C and B 2 e b L g n; write CB 4 b c g l l.
    """
    return torch.einsum("bcign,bcjgn->bcgij", C, B)


def chunk_scan(CB: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor, C: torch.Tensor,
               prev_states: torch.Tensor, D: torch.Tensor | None = None) -> torch.Tensor:
    """Stage 5: the outputs, from inside the chunk (quadratic form) and from the state entering it.

    CB (b, c, g, l, l), x (b, c, l, h, p), dt and dA_cumsum (b, h, c, l), C (b, c, l, g, n),
    prev_states (b, c, h, p, n), D (h) or None -> out (b, c, l, h, p):

        out_i = sum_{j <= i} CB_ij exp(dA_cumsum_i - dA_cumsum_j) dt_j x_j      (intra-chunk)
              + exp(dA_cumsum_i) C_i . prev_state                               (inter-chunk)
              + D x_i

    FLOPs: 2 b L h l p (the (l, l) by (l, p) GEMM, as a dense square) + 4 b L h l (the decay
           mask: a subtract, an exp and two multiplies per element) + 2 b L h p n (C @ state)
           + b L h (1 + 4 p) (exp(dA_cumsum), its scaling, the sum, D x).
    Bytes: read CB 4 b c g l l, x e b L h p, C e b L g n, dt and dA_cumsum 2 * 4 b L h,
    prev_states 4 b c h p n; write out e b L h p.
    """
    h, l = x.shape[3], x.shape[2]
    causal = torch.ones(l, l, dtype=torch.bool, device=x.device).tril()
    segsum = dA_cumsum[..., :, None] - dA_cumsum[..., None, :]         # (b, h, c, i, j)
    decay = torch.exp(segsum.masked_fill(~causal, float("-inf")))     # 0 where j > i
    weight = _heads(CB, h, 2) * (decay * dt[..., None, :]).transpose(1, 2)  # (b, c, h, i, j)
    out = torch.einsum("bchij,bcjhp->bcihp", weight, x)
    from_state = torch.einsum("bclhn,bchpn->bclhp", _heads(C, h, 3), prev_states)
    out = out + from_state * torch.exp(dA_cumsum).permute(0, 2, 3, 1)[..., None]
    if D is not None:
        out = out + D[:, None] * x
    return out


def ssd_reference(x, dt, A, B, C, chunk_size, D=None, initial_states=None, dt_bias=None, dt_softplus=False,
                  return_final_states=False):
    """The chunked SSD forward in float64, stage by stage (see the module docstring).

    x (b, L, h, p), dt (b, L, h), A (h), B and C (b, L, g, n), D (h) or None, initial_states
    (b, h, p, n) or None, dt_bias (h) or None -> out (b, L, h, p) in x's dtype, and the final
    states (b, h, p, n) in float64 when ``return_final_states``. Any L >= 0 works (the last
    chunk is padded); ValueError on shapes off the contract or a chunk_size below 1.
    """
    b, L, h, p, g, n = check_shapes(x, dt, A, B, C, D, initial_states, dt_bias)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    dt_eff, dA_cumsum = chunk_cumsum(_f64(dt), _f64(A), chunk_size, _f64(dt_bias), dt_softplus)
    xc, Bc, Cc = (_chunked(_f64(t), chunk_size) for t in (x, B, C))
    states = chunk_state(Bc, xc, dt_eff, dA_cumsum)
    prev_states, final_states = state_passing(states, dA_cumsum, _f64(initial_states))
    CB = bmm_chunk(Cc, Bc)
    out = chunk_scan(CB, xc, dt_eff, dA_cumsum, Cc, prev_states, _f64(D))
    out = out.reshape(b, -1, h, p)[:, :L].to(x.dtype)
    return (out, final_states) if return_final_states else out


# ----------------------------------------------------------------------------- bytes and FLOPs

@dataclass(frozen=True)
class SSDCost:
    """What one SSD forward moves and computes. ``bytes_read`` and ``bytes_written`` are the
    unavoidable traffic; ``stage_bytes`` what five separate stage kernels would move."""
    bytes_read: int
    bytes_written: int
    stage_flops: dict[str, int]
    stage_bytes: dict[str, int]

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def flops(self) -> int:
        return sum(self.stage_flops.values())

    @property
    def intensity(self) -> float:
        """FLOPs per unavoidable byte."""
        return self.flops / self.bytes


def ssd_bytes_and_flops(b: int, L: int, h: int, p: int, n: int, g: int, chunk: int, elem_bytes: int, *,
                        initial_states: bool = False) -> SSDCost:
    """Bytes that must move and FLOPs of each stage for one SSD forward (with D, as Mamba-2 has).

    Unavoidable traffic: read x (b L h p), B and C (b L g n each) and dt (b L h) at
    ``elem_bytes`` each, plus the initial states (b h p n, fp32) if ``initial_states``; write
    out (b L h p) at ``elem_bytes`` and the final states (b h p n) in fp32. A, D and dt_bias
    (h values each) are left out. For (b, L, h, p, n, g) = (8, 4096, 64, 64, 128, 1) in bf16:
    x 268.4 MB + out 268.4 MB + B, C 8.4 MB each + dt 4.2 MB + final states 16.8 MB = 574.6 MB,
    the chapter's "about 0.58 GB" (with dt in fp32 it is 578.8 MB).

    The FLOPs and ``stage_bytes`` follow the stage docstrings, over the padded length c l.
    """
    c = -(-L // chunk)
    Lp, e, s = c * chunk, elem_bytes, FP32
    read = e * (b * L * h * p + 2 * b * L * g * n + b * L * h) + (s * b * h * p * n if initial_states else 0)
    written = e * b * L * h * p + s * b * h * p * n
    stage_flops = {
        "chunk_cumsum": 2 * b * Lp * h,
        "chunk_state": 2 * b * Lp * h * p * n + b * Lp * h * (p + 3),
        "state_passing": b * c * h * (2 * p * n + 1),
        "bmm_chunk": 2 * b * Lp * g * chunk * n,
        "chunk_scan": 2 * b * Lp * h * chunk * p + 4 * b * Lp * h * chunk + 2 * b * Lp * h * p * n
                      + b * Lp * h * (1 + 4 * p),
    }
    states = s * b * c * h * p * n
    stage_bytes = {
        "chunk_cumsum": e * b * L * h + 2 * s * b * Lp * h,
        "chunk_state": e * (b * L * h * p + b * L * g * n) + 2 * s * b * Lp * h + states,
        "state_passing": 2 * states + s * b * h * c + s * b * h * p * n * (2 if initial_states else 1),
        "bmm_chunk": 2 * e * b * L * g * n + s * b * c * g * chunk * chunk,
        "chunk_scan": s * b * c * g * chunk * chunk + e * (2 * b * L * h * p + b * L * g * n)
                      + 2 * s * b * Lp * h + states,
    }
    return SSDCost(read, written, stage_flops, stage_bytes)
