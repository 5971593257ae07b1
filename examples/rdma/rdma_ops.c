/* Every RC operation between two processes, each result verified.
 *
 *   rdma_ops [-p PORT]            server: exposes a 2 MiB region plus a counter
 *   rdma_ops [-p PORT] HOST       client: writes, reads, atomics, sends against it
 *
 * The client checks every byte it reads back and every atomic's returned value, the order
 * of its completions, and that unsignaled work requests produce none; the server checks the
 * messages it receives (data, immediate, length) and, at the end, every byte of its region
 * against the pattern the client wrote.  Exit status 0 only when everything matched.
 */
#include "common.h"

#define REGION (2u << 20)		/* the server's data region */
#define COUNTER_INIT 1000ull
#define FINAL_IMM 0xC0FFEEu
#define NSEND 3

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static int checks;

static uint8_t pattern(uint64_t off, uint32_t seed)
{
	return (uint8_t)((off * 2654435761u + seed) >> 7);
}

static void setup(void)
{
	struct ibv_qp_init_attr ia = {
		.cap = {.max_send_wr = 256, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 2,
			.max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
	};

	ctx = open_first_device();
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = cq;
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp: %s", strerror(errno));
	CHECK(ia.cap.max_inline_data >= 64, "max_inline_data %u", ia.cap.max_inline_data);
}

static void post(struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(qp, wr, &bad);

	CHECK(!err, "ibv_post_send: %s (wr_id %llu)", strerror(err),
	      bad ? (unsigned long long)bad->wr_id : 0ull);
}

/* Waits for N completions, all successful, with wr_ids FIRST, FIRST+1, ... */
static void expect_completions(int n, uint64_t first, enum ibv_wc_opcode *ops)
{
	struct ibv_wc wc[64];

	CHECK(n <= 64, "too many");
	poll_n(cq, wc, n, 30);
	for (int i = 0; i < n; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)wc[i].wr_id,
		      ibv_wc_status_str(wc[i].status));
		CHECK(wc[i].wr_id == first + (uint64_t)i, "completion %d has wr_id %llu, expected %llu", i,
		      (unsigned long long)wc[i].wr_id, (unsigned long long)(first + (uint64_t)i));
		if (ops)
			CHECK(wc[i].opcode == ops[i], "wr %llu: opcode %d, expected %d",
			      (unsigned long long)wc[i].wr_id, wc[i].opcode, ops[i]);
	}
	/* nothing more: unsignaled work requests leave no completion */
	usleep(2000);
	CHECK(ibv_poll_cq(cq, 1, wc) == 0, "unexpected completion wr_id %llu", (unsigned long long)wc[0].wr_id);
}

static struct ibv_send_wr rdma_wr(uint64_t id, enum ibv_wr_opcode op, struct ibv_sge *sg, int nsg,
				  const struct peer_info *srv, uint64_t off, unsigned flags)
{
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.opcode = op;
	wr.sg_list = sg;
	wr.num_sge = nsg;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = srv->addr + off;
	wr.wr.rdma.rkey = srv->rkey;
	return wr;
}

static void client(const char *host, int port)
{
	uint8_t *buf = aligned_alloc(4096, 2 * REGION + 4096);
	uint64_t *results = (uint64_t *)(buf + 2 * REGION);
	struct peer_info me = {0}, srv;
	struct ibv_mr *mr;
	struct ibv_sge sg[4];
	struct ibv_send_wr wr, w[8];
	uint64_t id = 1, expect;
	int fd;

	setup();
	memset(buf, 0, 2 * REGION + 4096);
	mr = ibv_reg_mr(pd, buf, 2 * REGION + 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
	fill_local_info(ctx, qp, &me);
	fd = tcp_connect_or_accept(host, port);
	exchange(fd, &me, &srv);
	connect_rc(qp, &me, &srv, 0);
	sync_peer(fd);

	/* 1. WRITE then READ back, sizes 1 B .. 1 MiB + 13, every byte compared */
	static const uint32_t sizes[] = {1, 7, 64, 4096, 65536, (1u << 20) + 13};
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t n = sizes[s], off = 4096 * s + s;
		uint8_t *src = buf, *dst = buf + REGION;

		for (uint32_t i = 0; i < n; i++)
			src[i] = pattern(i, 7 + s);
		memset(dst, 0, n);
		sg[0] = (struct ibv_sge){(uintptr_t)src, n, mr->lkey};
		wr = rdma_wr(id, IBV_WR_RDMA_WRITE, sg, 1, &srv, off, IBV_SEND_SIGNALED);
		post(&wr);
		expect_completions(1, id++, (enum ibv_wc_opcode[]){IBV_WC_RDMA_WRITE});
		sg[1] = (struct ibv_sge){(uintptr_t)dst, n, mr->lkey};
		wr = rdma_wr(id, IBV_WR_RDMA_READ, &sg[1], 1, &srv, off, IBV_SEND_SIGNALED);
		post(&wr);
		expect_completions(1, id++, (enum ibv_wc_opcode[]){IBV_WC_RDMA_READ});
		CHECK(!memcmp(src, dst, n), "write/read of %u bytes differs", n);
		printf("write+read %u bytes: identical\n", n);
		checks++;
	}

	/* 2. gather (WRITE from 3 pieces) and scatter (READ into 2 pieces) */
	for (int i = 0; i < 300; i++)
		buf[i] = (uint8_t)(i * 3 + 1);
	sg[0] = (struct ibv_sge){(uintptr_t)buf, 100, mr->lkey};
	sg[1] = (struct ibv_sge){(uintptr_t)buf + 100, 150, mr->lkey};
	sg[2] = (struct ibv_sge){(uintptr_t)buf + 250, 50, mr->lkey};
	wr = rdma_wr(id, IBV_WR_RDMA_WRITE, sg, 3, &srv, 8192, IBV_SEND_SIGNALED);
	post(&wr);
	expect_completions(1, id++, NULL);
	memset(buf + REGION, 0, 300);
	sg[0] = (struct ibv_sge){(uintptr_t)buf + REGION, 123, mr->lkey};
	sg[1] = (struct ibv_sge){(uintptr_t)buf + REGION + 1000, 177, mr->lkey};
	wr = rdma_wr(id, IBV_WR_RDMA_READ, sg, 2, &srv, 8192, IBV_SEND_SIGNALED);
	post(&wr);
	expect_completions(1, id++, NULL);
	CHECK(!memcmp(buf, buf + REGION, 123) && !memcmp(buf + 123, buf + REGION + 1000, 177),
	      "gather/scatter differs");
	printf("gather 3 sges, scatter 2 sges: identical\n");
	checks++;

	/* 3. inline WRITE (the data travels inside the WQE) */
	{
		char msg[48];

		snprintf(msg, sizeof(msg), "inline data, %d bytes of it....................", 48);
		sg[0] = (struct ibv_sge){(uintptr_t)msg, sizeof(msg), 0};
		wr = rdma_wr(id, IBV_WR_RDMA_WRITE, sg, 1, &srv, 16384, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
		post(&wr);
		memset(msg, 0, sizeof(msg));	/* the buffer is free as soon as posting returns */
		expect_completions(1, id++, NULL);
		sg[0] = (struct ibv_sge){(uintptr_t)buf + REGION, 48, mr->lkey};
		wr = rdma_wr(id, IBV_WR_RDMA_READ, sg, 1, &srv, 16384, IBV_SEND_SIGNALED);
		post(&wr);
		expect_completions(1, id++, NULL);
		CHECK(!memcmp(buf + REGION, "inline data, 48 bytes of it", 27), "inline write lost");
		printf("inline write 48 bytes: identical\n");
		checks++;
	}

	/* 4. FETCH_ADD: each returns the value before it */
	expect = COUNTER_INIT;
	for (int i = 1; i <= 100; i++) {
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = id;
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		sg[0] = (struct ibv_sge){(uintptr_t)&results[0], 8, mr->lkey};
		wr.sg_list = sg;
		wr.num_sge = 1;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.atomic.remote_addr = srv.addr + REGION;
		wr.wr.atomic.rkey = srv.rkey;
		wr.wr.atomic.compare_add = (uint64_t)i;
		post(&wr);
		expect_completions(1, id++, (enum ibv_wc_opcode[]){IBV_WC_FETCH_ADD});
		CHECK(results[0] == expect, "fetch_add %d returned %llu, expected %llu", i,
		      (unsigned long long)results[0], (unsigned long long)expect);
		expect += (uint64_t)i;
	}
	printf("fetch_add x100: every returned value right, counter %llu\n", (unsigned long long)expect);
	checks++;

	/* 5. CMP_AND_SWP: a matching compare swaps, a wrong one does not */
	{
		uint64_t cases[2][3] = {{expect, 777, expect}, {12345, 999, 777}};	/* compare, swap, returns */

		for (int c = 0; c < 2; c++) {
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = id;
			wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
			sg[0] = (struct ibv_sge){(uintptr_t)&results[1], 8, mr->lkey};
			wr.sg_list = sg;
			wr.num_sge = 1;
			wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.atomic.remote_addr = srv.addr + REGION;
			wr.wr.atomic.rkey = srv.rkey;
			wr.wr.atomic.compare_add = cases[c][0];
			wr.wr.atomic.swap = cases[c][1];
			post(&wr);
			expect_completions(1, id++, (enum ibv_wc_opcode[]){IBV_WC_COMP_SWAP});
			CHECK(results[1] == cases[c][2], "cmp_swp %d returned %llu, expected %llu", c,
			      (unsigned long long)results[1], (unsigned long long)cases[c][2]);
		}
		sg[0] = (struct ibv_sge){(uintptr_t)&results[2], 8, mr->lkey};
		wr = rdma_wr(id, IBV_WR_RDMA_READ, sg, 1, &srv, REGION, IBV_SEND_SIGNALED);
		post(&wr);
		expect_completions(1, id++, NULL);
		CHECK(results[2] == 777, "counter after compare-and-swap %llu, expected 777",
		      (unsigned long long)results[2]);
		printf("cmp_swp: swapped when equal, kept when not, counter 777\n");
		checks++;
	}

	/* 6. a chain of eight: WRITE, WRITE (unsignaled), READ, FETCH_ADD, SEND_IMM x3, WRITE */
	{
		uint64_t base = id;
		enum ibv_wc_opcode ops[6] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD,
					     IBV_WC_SEND, IBV_WC_SEND, IBV_WC_SEND};
		struct ibv_sge s[8];
		char texts[NSEND][32];

		for (int i = 0; i < 64; i++)
			buf[i] = (uint8_t)(0xa0 + i);
		s[0] = (struct ibv_sge){(uintptr_t)buf, 32, mr->lkey};
		s[1] = (struct ibv_sge){(uintptr_t)buf + 32, 32, mr->lkey};
		s[2] = (struct ibv_sge){(uintptr_t)buf + REGION, 64, mr->lkey};
		s[3] = (struct ibv_sge){(uintptr_t)&results[3], 8, mr->lkey};
		w[0] = rdma_wr(base + 0, IBV_WR_RDMA_WRITE, &s[0], 1, &srv, 20000, IBV_SEND_SIGNALED);
		w[1] = rdma_wr(base + 100, IBV_WR_RDMA_WRITE, &s[1], 1, &srv, 20032, 0);
		w[2] = rdma_wr(base + 1, IBV_WR_RDMA_READ, &s[2], 1, &srv, 20000, IBV_SEND_SIGNALED);
		memset(&w[3], 0, sizeof(w[3]));
		w[3].wr_id = base + 2;
		w[3].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		w[3].sg_list = &s[3];
		w[3].num_sge = 1;
		w[3].send_flags = IBV_SEND_SIGNALED;
		w[3].wr.atomic.remote_addr = srv.addr + REGION;
		w[3].wr.atomic.rkey = srv.rkey;
		w[3].wr.atomic.compare_add = 23;
		for (int i = 0; i < NSEND; i++) {
			snprintf(texts[i], sizeof(texts[i]), "send number %d", i);
			s[4 + i] = (struct ibv_sge){(uintptr_t)texts[i], (uint32_t)strlen(texts[i]) + 1, 0};
			memset(&w[4 + i], 0, sizeof(w[4 + i]));
			w[4 + i].wr_id = base + 3 + (uint64_t)i;
			w[4 + i].opcode = IBV_WR_SEND_WITH_IMM;
			w[4 + i].imm_data = htonl(0x5000u + (uint32_t)i);
			w[4 + i].sg_list = &s[4 + i];
			w[4 + i].num_sge = 1;
			w[4 + i].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		}
		for (int i = 0; i < 6; i++)
			w[i].next = &w[i + 1];
		w[6].next = NULL;
		post(&w[0]);
		expect_completions(6, base, ops);
		id = base + 6;
		CHECK(!memcmp(buf, buf + REGION, 64), "chained write/read differs");
		CHECK(results[3] == 777, "chained fetch_add returned %llu", (unsigned long long)results[3]);
		printf("chain of 7: 6 signaled completions in order, none for the unsignaled\n");
		checks++;
	}

	/* 7. fill the whole region (32 chained 64 KiB writes, last one signaled), then notify
	 * with WRITE_WITH_IMM: the server compares every byte */
	{
		struct ibv_sge s[32];

		for (uint32_t i = 0; i < REGION; i++)
			buf[i] = pattern(i, 99);
		for (int i = 0; i < 32; i++) {
			s[i] = (struct ibv_sge){(uintptr_t)buf + (uint64_t)i * 65536, 65536, mr->lkey};
			w[i % 8] = rdma_wr(id + (uint64_t)i, IBV_WR_RDMA_WRITE, &s[i], 1, &srv,
					  (uint64_t)i * 65536, i == 31 ? IBV_SEND_SIGNALED : 0);
			if (i % 8 == 7) {
				for (int j = 0; j < 7; j++)
					w[j].next = &w[j + 1];
				w[7].next = NULL;
				post(&w[0]);
			}
		}
		expect_completions(1, id + 31, NULL);
		id += 32;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = id;
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htonl(FINAL_IMM);
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = srv.addr;
		wr.wr.rdma.rkey = srv.rkey;
		post(&wr);
		expect_completions(1, id++, NULL);
		printf("filled the server's %u bytes, then write-with-immediate\n", REGION);
		checks++;
	}
	sync_peer(fd);
	printf("client: %d checks passed, %llu work requests\n", checks, (unsigned long long)id - 1);
	close(fd);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
}

static void server(int port)
{
	uint8_t *region = aligned_alloc(4096, REGION + 4096);
	uint8_t *rbuf = aligned_alloc(4096, 64 * 64);
	uint64_t *counter = (uint64_t *)(region + REGION);
	struct peer_info me = {0}, cli;
	struct ibv_mr *mr, *rmr;
	struct ibv_wc wc[8];
	int fd, sends = 0, wimm = 0;

	setup();
	memset(region, 0, REGION + 4096);
	*counter = COUNTER_INIT;
	mr = ibv_reg_mr(pd, region, REGION + 4096,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	rmr = ibv_reg_mr(pd, rbuf, 64 * 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && rmr, "ibv_reg_mr: %s", strerror(errno));
	fill_local_info(ctx, qp, &me);
	me.addr = (uintptr_t)region;
	me.len = REGION + 4096;
	me.rkey = mr->rkey;
	fd = tcp_connect_or_accept(NULL, port);
	exchange(fd, &me, &cli);
	connect_rc(qp, &me, &cli,
		   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	/* receives can be posted once the QP is out of RESET; the client sends after the sync */
	for (int i = 0; i < 16; i++) {
		struct ibv_sge sg = {(uintptr_t)rbuf + (uint64_t)i * 64, 64, rmr->lkey};
		struct ibv_recv_wr rw = {.wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1}, *bad;

		CHECK(!ibv_post_recv(qp, &rw, &bad), "ibv_post_recv");
	}
	sync_peer(fd);
	while (!wimm) {
		poll_n(cq, wc, 1, 60);
		CHECK(wc[0].status == IBV_WC_SUCCESS, "receive: %s", ibv_wc_status_str(wc[0].status));
		CHECK(wc[0].wr_id == (uint64_t)(sends + wimm), "receive wr_id %llu out of order",
		      (unsigned long long)wc[0].wr_id);
		if (wc[0].opcode == IBV_WC_RECV) {
			char want[32];

			snprintf(want, sizeof(want), "send number %d", sends);
			CHECK(wc[0].wc_flags & IBV_WC_WITH_IMM, "send without immediate");
			CHECK(ntohl(wc[0].imm_data) == 0x5000u + (uint32_t)sends, "immediate %#x",
			      ntohl(wc[0].imm_data));
			CHECK(wc[0].byte_len == strlen(want) + 1, "byte_len %u", wc[0].byte_len);
			CHECK(!strcmp((char *)rbuf + (uint64_t)wc[0].wr_id * 64, want), "send %d data", sends);
			CHECK(wc[0].src_qp == cli.qpn, "src_qp %#x", wc[0].src_qp);
			sends++;
		} else {
			CHECK(wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM, "opcode %d", wc[0].opcode);
			CHECK(ntohl(wc[0].imm_data) == FINAL_IMM, "final immediate %#x", ntohl(wc[0].imm_data));
			wimm = 1;
		}
	}
	CHECK(sends == NSEND, "%d sends", sends);
	for (uint32_t i = 0; i < REGION; i++)
		CHECK(region[i] == pattern(i, 99), "byte %u of the region: %#x, expected %#x", i,
		      region[i], pattern(i, 99));
	CHECK(*counter == 777 + 23, "counter %llu", (unsigned long long)*counter);
	sync_peer(fd);
	printf("server: %d sends with immediates, write-with-immediate %#x, %u bytes verified, "
	       "counter %llu\n", sends, FINAL_IMM, REGION, (unsigned long long)*counter);
	close(fd);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(region);
	free(rbuf);
}

int main(int argc, char **argv)
{
	int port = 18600, opt;

	while ((opt = getopt(argc, argv, "p:")) != -1)
		if (opt == 'p')
			port = atoi(optarg);
	srand48(getpid());
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (optind < argc)
		client(argv[optind], port);
	else
		server(port);
	return 0;
}
