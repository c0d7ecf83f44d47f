"""Zero-bubble schedules (Qi et al., ICLR'24): the backward split into B and W.

B computes the gradient of a stage's input (the next upstream stage waits for it); W
computes its weights' gradient (nobody waits for it), so W can be deferred into bubbles.

* ZB-H1: 1F1B's memory (at most p − s micro-batches between F and B on stage s). Stage s
  runs p − s forwards, then after each B a forward while forwards remain, deferring W so
  at most p − 1 are pending; once the forwards are done, up to two W after each B, and
  the rest after the last B. Bubble (p − 1)(T_F + T_B − T_W).
* ZB-H2: more memory (2p − 1 − 2s in flight on stage s) to fill the warm-up too: stage s
  runs 2p − 1 − 2s forwards, then one B and one F alternately, then after each B one W,
  and the remaining W at the end (the "parallelogram"). Bubble (p − 1)(T_F + T_B − 2 T_W)
  of each stage's execution time, when T_W ≤ (T_F + T_B)/2.

Both orders are fixed (the paper's handcrafted schedules, derived under equal F, B, W
times); ``docs/schedules.md`` shows the closed forms hold for other ratios too.
"""

from __future__ import annotations

from .registry import register_schedule


def _split_backward(m: int, warmup: int, w_before_f, w_after_b) -> list[tuple[str, int]]:
    """The shape both ZB schedules share: ``warmup`` forwards, then a B per step followed
    by a forward while forwards remain, W after the last B. ``w_before_f(k, nw)`` and
    ``w_after_b(k, nw)`` say how many pending W (``nw`` done so far) run after the k-th B
    while forwards remain, respectively once they are done."""
    nf, nw = min(warmup, m), 0
    out = [("F", j) for j in range(nf)]
    for k in range(m):
        out.append(("B", k))
        if k == m - 1:
            return out + [("W", j) for j in range(nw, m)]
        n = w_before_f(k, nw) if nf < m else w_after_b(k, nw)
        out += [("W", j) for j in range(nw, nw + n)]
        nw += n
        if nf < m:
            out.append(("F", nf))
            nf += 1
    return out


@register_schedule("zb_h1", "ZB-H1: split backward (B, W), W deferred into the bubbles; 1F1B's memory")
def zb_h1(stage: int, p: int, m: int) -> list[tuple[str, int]]:
    # keep at most p − 1 weight gradients pending; once forwards are done, up to two W per B
    return _split_backward(m, p - stage, lambda k, nw: int(k + 1 - nw >= p), lambda k, nw: min(2, k + 1 - nw))


@register_schedule("zb_h2", "ZB-H2: split backward, extra warm-up forwards, W at the tail; (2p-1) in flight")
def zb_h2(stage: int, p: int, m: int) -> list[tuple[str, int]]:
    # no W while forwards remain (the parallelogram), then one W per B
    return _split_backward(m, 2 * p - 1 - 2 * stage, lambda k, nw: 0, lambda k, nw: int(nw < k))
