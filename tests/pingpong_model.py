"""What rdma-core's ibv_{rc,ud}_pingpong do, as the tests that trace them count it."""

RX_DEPTH = 500  # their default receive queue depth


def recv_wrs_posted(iters: int, depth: int = RX_DEPTH) -> int:
    """Receive WRs ibv_{rc,ud}_pingpong post for `iters` messages: `depth` at start, then a refill
    to `depth` whenever only one is left (their main loop), one ibv_post_recv call each."""
    routs = total = depth
    for _ in range(iters):
        routs -= 1
        if routs <= 1:
            total += depth - routs
            routs = depth
    return total
