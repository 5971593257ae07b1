/* A stream of RDMA WRITEs from a client to a server process, over one or several QPs.
 *
 *   rdma_stream [-p PORT] [-n WRITES] [-s SIZE] [-q QPS] [-d DEPTH] [-c SIGNAL_EVERY] [-V]
 *               [HOST]
 *
 * Server (no HOST): exposes a region and waits.  Client: keeps up to DEPTH writes in flight per
 * QP, signals every SIGNAL_EVERY-th one, checks that every completion is successful and comes
 * in order (wr_id = index of the write), and prints the message rate.  With -V every write has
 * a slot of its own in the server's region holding its index + 1, and the server checks every
 * slot afterwards: none lost.  Without -V the writes cycle through a 4 MiB window.
 */
#include "common.h"

#define WINDOW (4u << 20)
#define MAXQ 16

struct opts {
	int port;
	long n;
	uint32_t size;
	int qps;
	int depth;
	int every;
	int verify;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp[MAXQ];
static struct peer_info me[MAXQ], them[MAXQ];

static void setup(const struct opts *o)
{
	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq: %s", strerror(errno));
	for (int i = 0; i < o->qps; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq,
			.cap = {.max_send_wr = (uint32_t)o->depth, .max_recv_wr = 1, .max_send_sge = 1,
				.max_recv_sge = 1, .max_inline_data = 32},
			.qp_type = IBV_QPT_RC,
		};

		qp[i] = ibv_create_qp(pd, &ia);
		CHECK(qp[i], "ibv_create_qp: %s", strerror(errno));
		fill_local_info(ctx, qp[i], &me[i]);
	}
}

static size_t region_size(const struct opts *o)
{
	return o->verify ? (size_t)o->n * o->size : WINDOW;
}

static void client(const char *host, const struct opts *o)
{
	size_t rlen = region_size(o);
	uint8_t *buf = aligned_alloc(4096, (size_t)o->depth * o->qps * o->size + 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, (size_t)o->depth * o->qps * o->size + 4096,
				       IBV_ACCESS_LOCAL_WRITE);
	long posted[MAXQ] = {0}, done[MAXQ] = {0}, next_wc[MAXQ], total_done = 0, total_posted = 0;
	long per_q = o->n / o->qps;
	struct ibv_wc wc[64];
	double t0, t1;
	int fd;

	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	CHECK(o->n % o->qps == 0 && per_q % o->every == 0, "writes must divide evenly");
	fd = tcp_connect_or_accept(host, o->port);
	for (int i = 0; i < o->qps; i++) {
		exchange(fd, &me[i], &them[i]);
		connect_rc(qp[i], &me[i], &them[i], 0);
		next_wc[i] = o->every - 1;
	}
	sync_peer(fd);
	t0 = now_s();
	while (total_done < o->n) {
		for (int q = 0; q < o->qps; q++) {
			struct ibv_send_wr wr[32], *bad;
			struct ibv_sge sg[32];
			int k = 0;

			while (k < 32 && posted[q] < per_q && posted[q] - done[q] < o->depth) {
				long idx = posted[q] * o->qps + q;	/* global index of the write */
				uint8_t *src = buf + ((size_t)q * o->depth + (size_t)(posted[q] % o->depth)) * o->size;
				uint64_t off = o->verify ? (uint64_t)idx * o->size
							 : ((uint64_t)idx * o->size) % (WINDOW - o->size);

				memset(src, 0, o->size);
				memcpy(src, &(uint64_t){(uint64_t)idx + 1}, o->size < 8 ? o->size : 8);
				sg[k] = (struct ibv_sge){(uintptr_t)src, o->size, mr->lkey};
				memset(&wr[k], 0, sizeof(wr[k]));
				wr[k].wr_id = (uint64_t)posted[q];
				wr[k].opcode = IBV_WR_RDMA_WRITE;
				wr[k].sg_list = &sg[k];
				wr[k].num_sge = 1;
				wr[k].send_flags = ((posted[q] + 1) % o->every == 0 ? IBV_SEND_SIGNALED : 0) |
						   (o->size <= 32 ? IBV_SEND_INLINE : 0);
				wr[k].wr.rdma.remote_addr = them[q].addr + off;
				wr[k].wr.rdma.rkey = them[q].rkey;
				wr[k].next = NULL;
				if (k)
					wr[k - 1].next = &wr[k];
				k++;
				posted[q]++;
				total_posted++;
			}
			if (k)
				CHECK(!ibv_post_send(qp[q], &wr[0], &bad), "ibv_post_send");
		}
		int n = ibv_poll_cq(cq, 64, wc);

		CHECK(n >= 0, "poll");
		for (int i = 0; i < n; i++) {
			int q;

			for (q = 0; q < o->qps && wc[i].qp_num != qp[q]->qp_num; q++)
				;
			CHECK(q < o->qps, "completion of unknown QP %#x", wc[i].qp_num);
			CHECK(wc[i].status == IBV_WC_SUCCESS, "write %llu on QP %d: %s",
			      (unsigned long long)wc[i].wr_id, q, ibv_wc_status_str(wc[i].status));
			CHECK((long)wc[i].wr_id == next_wc[q], "QP %d: completion for write %llu, expected %ld",
			      q, (unsigned long long)wc[i].wr_id, next_wc[q]);
			next_wc[q] += o->every;
			done[q] += o->every;
			total_done += o->every;
		}
	}
	t1 = now_s();
	sync_peer(fd);
	{
		char verdict[128];

		xfer(fd, verdict, sizeof(verdict), 0);
		printf("client: %ld writes of %u bytes on %d QP(s), %ld completions in order, "
		       "%.0f msg/s\n", o->n, o->size, o->qps, o->n / o->every, o->n / (t1 - t0));
		printf("%s\n", verdict);
	}
	(void)rlen;
	close(fd);
}

static void server(const struct opts *o)
{
	size_t rlen = region_size(o);
	uint8_t *region = aligned_alloc(4096, rlen);
	struct ibv_mr *mr;
	char verdict[128];
	long bad = 0;
	int fd;

	CHECK(region, "no memory for %zu bytes", rlen);
	memset(region, 0, rlen);
	mr = ibv_reg_mr(pd, region, rlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	fd = tcp_connect_or_accept(NULL, o->port);
	for (int i = 0; i < o->qps; i++) {
		me[i].addr = (uintptr_t)region;
		me[i].len = rlen;
		me[i].rkey = mr->rkey;
		exchange(fd, &me[i], &them[i]);
		connect_rc(qp[i], &me[i], &them[i], IBV_ACCESS_REMOTE_WRITE);
	}
	sync_peer(fd);	/* start */
	sync_peer(fd);	/* the client saw its last completion */
	if (o->verify) {
		for (long i = 0; i < o->n; i++) {
			uint64_t v = 0;

			memcpy(&v, region + (size_t)i * o->size, o->size < 8 ? o->size : 8);
			if (o->size >= 8 && v != (uint64_t)i + 1)
				bad++;
		}
		snprintf(verdict, sizeof(verdict), "server: %ld of %ld slots hold their write", o->n - bad, o->n);
	} else {
		snprintf(verdict, sizeof(verdict), "server: done");
	}
	xfer(fd, verdict, sizeof(verdict), 1);
	printf("%s\n", verdict);
	close(fd);
}

int main(int argc, char **argv)
{
	struct opts o = {.port = 18700, .n = 1000000, .size = 8, .qps = 1, .depth = 128, .every = 1};
	int opt;

	while ((opt = getopt(argc, argv, "p:n:s:q:d:c:V")) != -1) {
		switch (opt) {
		case 'p': o.port = atoi(optarg); break;
		case 'n': o.n = atol(optarg); break;
		case 's': o.size = (uint32_t)atoi(optarg); break;
		case 'q': o.qps = atoi(optarg); break;
		case 'd': o.depth = atoi(optarg); break;
		case 'c': o.every = atoi(optarg); break;
		case 'V': o.verify = 1; break;
		default:
			fprintf(stderr, "usage: %s [-p port] [-n writes] [-s size] [-q qps] [-d depth] "
					"[-c signal_every] [-V] [host]\n", argv[0]);
			return 2;
		}
	}
	CHECK(o.qps >= 1 && o.qps <= MAXQ && o.size >= 1 && o.every >= 1 && o.depth >= o.every,
	      "bad options");
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand48(getpid());
	setup(&o);
	if (optind < argc)
		client(argv[optind], &o);
	else
		server(&o);
	return 0;
}
