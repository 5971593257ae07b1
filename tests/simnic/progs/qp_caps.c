/* Send-queue limits of RC, UC and UD QPs as ibv_create_qp answers them: the largest
 * max_inline_data accepted (found as libfabric's verbs provider finds it, by creating QPs),
 * what a request is given back (max_inline_data, max_send_wr), and which requests fail.
 * Each line is compared by tests/simnic/test_qp_caps.py.  Exit status 2 on a failed check. */
#include "common.h"

static struct ibv_pd *pd;
static struct ibv_cq *cq;

static const char *type_name(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD";
}

/* Creates a QP with the given capabilities; on success CAP holds what it was given. */
static int try_qp(enum ibv_qp_type t, struct ibv_qp_cap *cap)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .cap = *cap, .qp_type = t,
				      .sq_sig_all = 1};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		return errno;
	*cap = ia.cap;
	ibv_destroy_qp(qp);
	return 0;
}

/* The largest max_inline_data a QP with one send WR and one gather entry accepts. */
static uint32_t largest_inline(enum ibv_qp_type t)
{
	uint32_t ok = 0, bad = 1u << 16;

	while (bad - ok > 1) {
		uint32_t mid = ok + (bad - ok) / 2;
		struct ibv_qp_cap cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
					 .max_recv_sge = 1, .max_inline_data = mid};

		if (try_qp(t, &cap))
			bad = mid;
		else
			ok = mid;
	}
	return ok;
}

static void given(enum ibv_qp_type t, uint32_t wr, uint32_t sge, uint32_t inl)
{
	struct ibv_qp_cap cap = {.max_send_wr = wr, .max_recv_wr = 1, .max_send_sge = sge,
				 .max_recv_sge = 1, .max_inline_data = inl};
	int e = try_qp(t, &cap);

	if (e)
		printf("%s wr %u sge %u inline %u: %s\n", type_name(t), wr, sge, inl,
		       e == EINVAL ? "EINVAL" : strerror(e));
	else
		printf("%s wr %u sge %u inline %u: max_inline_data %u max_send_wr %u\n", type_name(t),
		       wr, sge, inl, cap.max_inline_data, cap.max_send_wr);
}

int main(void)
{
	static const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
	struct ibv_context *ctx = open_first_device();

	setvbuf(stdout, NULL, _IOLBF, 0);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq");
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		enum ibv_qp_type t = types[i];
		uint32_t most = largest_inline(t);

		printf("%s largest inline: %u\n", type_name(t), most);
		given(t, 1, 1, 0);
		given(t, 16, 1, 64);
		given(t, 384, 4, 512);
		given(t, 384, 4, most);
		given(t, 1, 1, most + 1);
		given(t, 1, 30, 0);
		given(t, 1, 31, 0);
	}
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
