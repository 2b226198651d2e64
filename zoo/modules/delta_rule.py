"""The gated delta rule (Gated DeltaNet, Yang et al. 2024), in two forms that compute the same numbers.

Per value head, a state S (Dk, Dv) is decayed, corrected towards the new key's value and read by the query:

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T          o_t = S_t^T q_t

with q, k L2-normalised and q scaled by 1/sqrt(Dk). `recurrent` runs that one token at a time (decoding);
`chunked` runs C tokens at once (training, prefill): inside a chunk with G = cumsum(g) and S_0 the state
before it, the corrections u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t) solve the unit lower-triangular system

    (I + A) U = beta V - beta exp(G) K S_0,    A[t, j] = beta_t exp(G_t - G_j) k_t . k_j  (j < t)

and then O = exp(G) Q S_0 + (exp(G_t - G_j) q_t . k_j)_{j <= t} U, S_C = exp(G_C) S_0 + K^T exp(G_C - G) U.
Shapes: q, k (B, H, T, Dk), v (B, H, T, Dv), g, beta (B, H, T), state (B, H, Dk, Dv); H is the value heads
(key heads repeated to them by the caller). Computed in float32 (float64 inputs: float64)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _prepare(q, k, v, g, beta, state):
    """Copies in float32 at least (float64 stays), q scaled by 1/sqrt(Dk), a zero state where none is
    given."""
    b, h, _, dk = k.shape
    dtype = torch.promote_types(v.dtype, torch.float32)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if state is None:
        state = q.new_zeros(b, h, dk, v.shape[-1])
    return q * dk**-0.5, k, v, g, beta, state.to(dtype)


def recurrent(q, k, v, g, beta, state=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token at a time: (out (B, H, T, Dv), final state (B, H, Dk, Dv))."""
    out, states = recurrent_states(q, k, v, g, beta, state)
    return out, states[-1]


def recurrent_states(q, k, v, g, beta, state=None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One token at a time: (out (B, H, T, Dv), the state (B, H, Dk, Dv) after each of the T tokens)."""
    q, k, v, g, beta, state = _prepare(q, k, v, g, beta, state)
    outs, states = [], []
    for t in range(q.shape[2]):
        state = state * g[:, :, t, None, None].exp()  # decay
        read = (k[:, :, t, :, None] * state).sum(-2)  # S^T k: (B, H, Dv)
        correction = beta[:, :, t, None] * (v[:, :, t] - read)  # (B, H, Dv)
        state = state + k[:, :, t, :, None] * correction[:, :, None, :]  # + k u^T
        outs.append((q[:, :, t, :, None] * state).sum(-2))  # S^T q: (B, H, Dv)
        states.append(state)
    return torch.stack(outs, dim=2), states


def chunked(q, k, v, g, beta, state=None, chunk_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """C = chunk_size tokens at a time (the sequence padded to whole chunks with g = beta = 0, which leave
    the state unchanged): (out (B, H, T, Dv), final state (B, H, Dk, Dv))."""
    q, k, v, g, beta, state = _prepare(q, k, v, g, beta, state)
    b, h, t, dk = k.shape
    c, dv = max(1, min(chunk_size, t)), v.shape[-1]  # a sequence shorter than a chunk: one chunk of it
    pad = -t % c
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (t + pad) // c
    q, k, v = (x.view(b, h, n, c, -1) for x in (q, k, v))  # (B, H, N, C, D)
    g, beta = g.view(b, h, n, c).cumsum(-1), beta.view(b, h, n, c)  # g is now G, the cumulative decay
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()  # j <= t
    span = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # exp(G_t - G_j)
    a = (beta[..., None] * span * (k @ k.transpose(-1, -2))).tril(-1)  # strictly lower: j < t
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    solve = torch.linalg.solve_triangular(eye + a, torch.cat(
        [beta[..., None] * v, (beta * g.exp())[..., None] * k], dim=-1), upper=False, unitriangular=True)
    u_free, u_state = solve.split([dv, dk], dim=-1)  # U = u_free - u_state S_0: (B, H, N, C, Dv|Dk)
    scores = (q @ k.transpose(-1, -2)) * span  # (B, H, N, C, C), zero above the diagonal
    decayed_q = q * g.exp()[..., None]  # exp(G_t) q_t
    to_end = (g[..., -1:] - g).exp()[..., None] * k  # exp(G_C - G_j) k_j
    outs = []
    for i in range(n):
        u = u_free[:, :, i] - u_state[:, :, i] @ state  # (B, H, C, Dv)
        outs.append(decayed_q[:, :, i] @ state + scores[:, :, i] @ u)
        state = state * g[:, :, i, -1, None, None].exp() + to_end[:, :, i].transpose(-1, -2) @ u
    return torch.cat(outs, dim=2)[:, :, :t], state
