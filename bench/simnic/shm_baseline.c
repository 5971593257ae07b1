/* The baseline of bench/simnic_bench.py: the emulated NIC's hand-off done with nothing but a
 * shared-memory ring between two processes, so that the NIC's figures can be read against
 * what two processes on this machine can do at all.
 *
 *   simnic_shm_baseline rate [-n MSGS] [-q QUEUES] [-d DEPTH] [-c SIGNAL_EVERY]
 *   simnic_shm_baseline lat  [-n ITERS]
 *
 * rate: the parent posts 8-byte "writes" (target offset + value) into one ring per queue, at
 * most DEPTH outstanding per queue; the child takes each, stores the value at the offset in a
 * shared region, and publishes its consumer index; the parent counts a completion for every
 * SIGNAL_EVERY-th message from that index.  This is the NIC's post -> execute -> complete
 * without the engines, the wire and the CQ in between.  Prints "rate: N msg/s".
 * lat: a ping-pong of one 8-byte value each way between the two processes (both spin), as
 * ibv_rc_pingpong's 8-byte SEND round trip does.  Prints "lat: X usec/iter" (round trip).
 */
#include <getopt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXQ 16
#define REGION (4u << 20)

struct slot {
	uint64_t off;
	uint64_t val;
};

struct queue {
	_Alignas(64) _Atomic uint64_t pi;	/* written by the poster */
	_Alignas(64) _Atomic uint64_t ci;	/* written by the executor */
	_Alignas(64) struct slot ring[];
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *shared(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	memset(p, 0, n);
	return p;
}

static int rate(long n, int nq, int depth, int every)
{
	size_t qsize = sizeof(struct queue) + (size_t)depth * sizeof(struct slot);
	uint8_t *qmem = shared(qsize * (size_t)nq + 64);
	uint8_t *region = shared(REGION);
	_Atomic int *stop = (_Atomic int *)shared(64);
	struct queue *q[MAXQ];
	long per_q = n / nq, total = 0;
	double t0, t1;
	pid_t child;

	for (int i = 0; i < nq; i++)
		q[i] = (struct queue *)(qmem + (size_t)i * ((qsize + 63) & ~(size_t)63));
	child = fork();
	if (child == 0) {
		uint64_t done[MAXQ] = {0};

		while (!atomic_load_explicit(stop, memory_order_relaxed)) {
			for (int i = 0; i < nq; i++) {
				uint64_t pi = atomic_load_explicit(&q[i]->pi, memory_order_acquire);

				while (done[i] < pi) {
					struct slot *s = &q[i]->ring[done[i] % (uint64_t)depth];

					memcpy(region + s->off, &s->val, 8);
					done[i]++;
				}
				atomic_store_explicit(&q[i]->ci, done[i], memory_order_release);
			}
		}
		_exit(0);
	}
	{
		long posted[MAXQ] = {0}, reaped[MAXQ] = {0};

		t0 = now_s();
		while (total < n) {
			for (int i = 0; i < nq; i++) {
				uint64_t ci = atomic_load_explicit(&q[i]->ci, memory_order_acquire);
				long k = 0;

				/* completions: every SIGNAL_EVERY-th message */
				while (reaped[i] + every <= (long)ci) {
					reaped[i] += every;
					total += every;
				}
				while (posted[i] < per_q && posted[i] - reaped[i] < depth && k < 32) {
					long idx = posted[i] * nq + i;
					struct slot *s = &q[i]->ring[posted[i] % depth];

					s->off = ((uint64_t)idx * 8) % (REGION - 8);
					s->val = (uint64_t)idx + 1;
					posted[i]++;
					k++;
				}
				if (k)
					atomic_store_explicit(&q[i]->pi, (uint64_t)posted[i], memory_order_release);
			}
		}
		t1 = now_s();
	}
	atomic_store(stop, 1);
	waitpid(child, NULL, 0);
	printf("rate: %ld messages of 8 bytes on %d queue(s), depth %d, signal every %d: %.0f msg/s\n",
	       n, nq, depth, every, n / (t1 - t0));
	return 0;
}

static int lat(long n)
{
	_Atomic uint64_t *ping = (_Atomic uint64_t *)shared(4096);
	_Atomic uint64_t *pong = ping + 16;	/* another cache line */
	double t0, t1;
	pid_t child = fork();

	if (child == 0) {
		for (uint64_t i = 1; i <= (uint64_t)n; i++) {
			while (atomic_load_explicit(ping, memory_order_acquire) != i)
				;
			atomic_store_explicit(pong, i, memory_order_release);
		}
		_exit(0);
	}
	t0 = now_s();
	for (uint64_t i = 1; i <= (uint64_t)n; i++) {
		atomic_store_explicit(ping, i, memory_order_release);
		while (atomic_load_explicit(pong, memory_order_acquire) != i)
			;
	}
	t1 = now_s();
	waitpid(child, NULL, 0);
	printf("lat: %ld iters of 8 bytes: %.2f usec/iter\n", n, (t1 - t0) * 1e6 / n);
	return 0;
}

int main(int argc, char **argv)
{
	long n = 1000000;
	int nq = 1, depth = 128, every = 1, opt;
	const char *mode = argc > 1 ? argv[1] : "";

	optind = 2;
	while ((opt = getopt(argc, argv, "n:q:d:c:")) != -1) {
		switch (opt) {
		case 'n': n = atol(optarg); break;
		case 'q': nq = atoi(optarg); break;
		case 'd': depth = atoi(optarg); break;
		case 'c': every = atoi(optarg); break;
		default: goto usage;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "rate") && nq >= 1 && nq <= MAXQ && depth >= every && every >= 1 &&
	    n % nq == 0 && (n / nq) % every == 0)
		return rate(n, nq, depth, every);
	if (!strcmp(mode, "lat") && n > 0)
		return lat(n);
usage:
	fprintf(stderr, "usage: %s rate [-n msgs] [-q queues] [-d depth] [-c signal_every]\n"
			"       %s lat [-n iters]\n", argv[0], argv[0]);
	return 2;
}
