/* A send's completion is in its CQ once the peer's ACK has reached the port: the first poll
 * after that returns it.
 *
 * A ConnectX writes the completion microseconds after the ACK arrives, whatever the host's
 * threads do.  On the emulated NIC the NIC's work runs on a thread of the process, or on a
 * thread that polls an empty CQ (the polling assist).  Here the sender's NIC thread is kept
 * from running (pinned to this thread's CPU with SCHED_IDLE while this thread spins), so the
 * ACK waits in its inbox until a poll runs the NIC's pass: that poll must return the
 * completion the pass wrote.
 *
 * One process, two devices (mlx5_0 sends, mlx5_1 receives: SIMNIC_DEVICES=2), ROUNDS rounds:
 *
 *   poll_after_ack <rounds>    prints "round N: <completions returned by that first poll> <status>",
 *                              or "round N: disturbed" when the NIC thread ran after all (or the
 *                              ACK came back within the pass that sent the message) */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>

#include "common.h"

#define MSG_LEN 64

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[MSG_LEN];
	struct peer_info me;
};

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	CHECK(list, "no RDMA device");
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "cannot open %s", name);
	ibv_free_device_list(list);
	return ctx;
}

static void side_init(struct side *s, const char *dev)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1}};

	s->ctx = open_device(dev);
	CHECK(s->pd = ibv_alloc_pd(s->ctx), "ibv_alloc_pd");
	CHECK(s->cq = ibv_create_cq(s->ctx, 8, NULL, NULL, 0), "ibv_create_cq");
	qa.send_cq = qa.recv_cq = s->cq;
	CHECK(s->qp = ibv_create_qp(s->pd, &qa), "ibv_create_qp");
	CHECK(s->mr = ibv_reg_mr(s->pd, s->buf, MSG_LEN, IBV_ACCESS_LOCAL_WRITE), "ibv_reg_mr");
	fill_local_info(s->ctx, s->qp, &s->me);
}

/* The NIC thread of device DEV in this process (named "simnic-<dev>"). */
static pid_t nic_thread(const char *dev)
{
	char want[32], path[64], comm[32];
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t tid = 0;

	snprintf(want, sizeof(want), "simnic-%.8s\n", dev);
	while (d && (e = readdir(d))) {
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if ((f = fopen(path, "r"))) {
			if (fgets(comm, sizeof(comm), f) && !strcmp(comm, want))
				tid = atoi(e->d_name);
			fclose(f);
		}
	}
	if (d)
		closedir(d);
	return tid;
}

/* Starves (on) or releases (off) the NIC thread TID: this thread's CPU, SCHED_IDLE. */
static void starve(pid_t tid, int on)
{
	static cpu_set_t all;
	struct sched_param sp = {0};
	cpu_set_t one;

	if (on) {
		sched_getaffinity(0, sizeof(all), &all);
		CPU_ZERO(&one);
		CPU_SET(sched_getcpu(), &one);
		sched_setaffinity(0, sizeof(one), &one);
		CHECK(!sched_setaffinity(tid, sizeof(one), &one), "pin the NIC thread");
		CHECK(!sched_setscheduler(tid, SCHED_IDLE, &sp), "SCHED_IDLE for the NIC thread");
	} else {
		sched_setscheduler(tid, SCHED_OTHER, &sp);
		sched_setaffinity(tid, sizeof(all), &all);
		sched_setaffinity(0, sizeof(all), &all);
	}
}

/* CPU time thread TID has had so far (ns).  A round in which the NIC thread got none is
 * exact: its message left through this thread's poll (so the NIC thread held no engine lock)
 * and its ACK waited for the measured poll; a round in which it ran (SCHED_IDLE still gets
 * scraps of a busy CPU) is reported "disturbed". */
static unsigned long long cpu_ns(pid_t tid)
{
	char path[64];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%llu", &ns) != 1)
			ns = 0;
		fclose(f);
	}
	return ns;
}

static void spin(double seconds)
{
	double end = now_s() + seconds;

	while (now_s() < end)
		;
}

int main(int argc, char **argv)
{
	struct side tx, rx;
	struct ibv_wc wc, twc;
	int rounds = argc > 1 ? atoi(argv[1]) : 10;

	side_init(&tx, "mlx5_0");
	side_init(&rx, "mlx5_1");
	connect_rc(tx.qp, &tx.me, &rx.me, 0);
	connect_rc(rx.qp, &rx.me, &tx.me, IBV_ACCESS_LOCAL_WRITE);
	pid_t tid = 0;
	for (int i = 0; i < 2000 && !tid; i++) {
		tid = nic_thread("mlx5_0");     /* it names itself once it runs */
		if (!tid)
			usleep(1000);
	}
	CHECK(tid, "no NIC thread for mlx5_0");

	for (int r = 0; r < rounds; r++) {
		struct ibv_sge rs = {(uintptr_t)rx.buf, MSG_LEN, rx.mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *bad_rw;
		struct ibv_sge ss = {(uintptr_t)tx.buf, MSG_LEN, tx.mr->lkey};
		struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad_sw;
		int n;

		CHECK(!ibv_post_recv(rx.qp, &rw, &bad_rw), "ibv_post_recv");
		starve(tid, 1);
		unsigned long long ran = cpu_ns(tid);
		memset(tx.buf, 'a' + r % 26, MSG_LEN);
		CHECK(!ibv_post_send(tx.qp, &sw, &bad_sw), "ibv_post_send");
		/* this poll's pass sends the message (its ACK is seldom back within the pass: then
		 * the round proves nothing) */
		int early = ibv_poll_cq(tx.cq, 1, &twc);
		poll_n(rx.cq, &wc, 1, 10);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "round %d: receive %s", r,
		      ibv_wc_status_str(wc.status));
		/* on a fabric the ACK is in by now (it left with the receive's placement) */
		spin(0.001);
		n = early ? 1 : ibv_poll_cq(tx.cq, 1, &twc);
		if (early || cpu_ns(tid) != ran)
			printf("round %d: disturbed\n", r);
		else
			printf("round %d: %d %s\n", r, n, n == 1 ? ibv_wc_status_str(twc.status) : "-");
		if (n == 0)
			poll_n(tx.cq, &twc, 1, 10);
		CHECK(twc.status == IBV_WC_SUCCESS && twc.wr_id == 1, "round %d: send %s", r,
		      ibv_wc_status_str(twc.status));
		starve(tid, 0);
	}
	return 0;
}
