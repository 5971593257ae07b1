"""The example programs in examples/rdma against the emulated NIC: every operation between
two processes with every byte and atomic result verified, and the error paths with the
completions, states, events and errnos hardware gives."""
import re

from .conftest import example, free_port, run, run_pair


def test_write_read_atomics_sends_between_two_processes(nic_env):
    prog = str(example("rdma_ops"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], nic_env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    assert cli.out.splitlines() == [
        "write+read 1 bytes: identical",
        "write+read 7 bytes: identical",
        "write+read 64 bytes: identical",
        "write+read 4096 bytes: identical",
        "write+read 65536 bytes: identical",
        "write+read 1048589 bytes: identical",
        "gather 3 sges, scatter 2 sges: identical",
        "inline write 48 bytes: identical",
        "fetch_add x100: every returned value right, counter 6050",
        "cmp_swp: swapped when equal, kept when not, counter 777",
        "chain of 7: 6 signaled completions in order, none for the unsignaled",
        "filled the server's 2097152 bytes, then write-with-immediate",
        "client: 12 checks passed, 158 work requests",
    ]
    assert srv.out.splitlines() == [
        "server: 3 sends with immediates, write-with-immediate 0xc0ffee, 2097152 bytes verified, "
        "counter 800",
    ]


EXPECTED_ERRORS = """\
bad_rkey: requester=REM_ACCESS_ERR next=WR_FLUSH_ERR requester_qp=ERR responder_qp=ERR event=local access violation work queue error
out_of_bounds: requester=REM_ACCESS_ERR next=WR_FLUSH_ERR requester_qp=ERR responder_qp=ERR event=local access violation work queue error
mr_without_remote_write: requester=REM_ACCESS_ERR next=WR_FLUSH_ERR requester_qp=ERR responder_qp=ERR event=local access violation work queue error
qp_without_remote_read: requester=REM_ACCESS_ERR next=WR_FLUSH_ERR requester_qp=ERR responder_qp=ERR event=local access violation work queue error
misaligned_atomic: requester=REM_INV_REQ_ERR next=WR_FLUSH_ERR requester_qp=ERR responder_qp=ERR event=invalid request local work queue error
bad_lkey: requester=LOC_PROT_ERR requester_qp=ERR responder_qp=RTS
read_into_readonly_mr: requester=LOC_PROT_ERR requester_qp=ERR responder_qp=RTS
send_too_long: requester=REM_INV_REQ_ERR responder=LOC_LEN_ERR responder_wr_id=7 responder_qp=ERR event=none
rnr_retry_0: requester=RNR_RETRY_EXC_ERR requester_qp=ERR responder_qp=RTS
rnr_retry_7: requester=SUCCESS receiver=SUCCESS after_ms>=30=1
no_such_qpn: requester=RETRY_EXC_ERR after_ms>=12=1 requester_qp=ERR
dead_peer: alive=SUCCESS dead=RETRY_EXC_ERR after=WR_FLUSH_ERR requester_qp=ERR
post_outside_rts: send_reset=ENOMEM recv_reset=EINVAL send_init=ENOMEM recv_init=0 send_rtr=ENOMEM
transitions: reset_to_rtr=EINVAL init_without_port=EINVAL init_port_2=EINVAL init=0 init_to_rts=EINVAL rtr_extra_attr=EINVAL rtr=0 err_to_rts=EINVAL state=ERR
destroy_in_use: pd_with_mr=EBUSY cq_with_qp=EBUSY srq_with_qp=EBUSY channel_with_cq=EBUSY pd_with_qp=EBUSY in_order=0
uc_read: requester=LOC_QP_OP_ERR requester_qp=ERR
reg_mr_remote_write_without_local_write: mr=NULL errno=EINVAL
sq_overflow: accepted=16 max_send_wr=16 then=ENOMEM
flush: receives_flushed_in_order=5
done
"""


def test_error_paths_give_what_hardware_gives(nic_env):
    r = run([str(example("rdma_errors"))], nic_env, timeout=120)
    assert r.rc == 0, r.out + r.err
    assert r.out.splitlines() == EXPECTED_ERRORS.splitlines()
    # nothing crashed and nothing was reported as an internal error
    assert not re.search(r"simnic: .*(overrun|lost|cannot)", r.err), r.err
