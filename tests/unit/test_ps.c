/* test_ps: shard and batch arithmetic, flat layouts, and one TCP parameter
 * server round in-process with closed-form values. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/ps.h"
#include "comm/sock.h"
#include "tensor/flat.h"
#include "par/dp.h"
#include "prog/trainopt.h"
#include "unit.h"

static void
test_shards(void)
{
	size_t totals[] = { 0, 1, 7, 100, 1001 }, off, len, next, min, max;
	int ok = 1;

	for (size_t t = 0; t < sizeof(totals) / sizeof(totals[0]); t++)
		for (int s = 1; s <= 5; s++) {
			next = 0, min = (size_t)-1, max = 0;
			for (int i = 0; i < s; i++) {
				ps_shard(totals[t], s, i, &off, &len);
				ok &= off == next;
				next = off + len;
				min = len < min ? len : min;
				max = len > max ? len : max;
			}
			ok &= next == totals[t] && max - min <= 1;
		}
	UNIT_OK(ok, "shards tile the vector, sizes within one element");
}

static void
test_split(void)
{
	long start, count, next = 0;
	int ok = 1;

	for (int r = 0; r < 3; r++) {
		train_split(200, 3, r, &start, &count);
		ok &= start == next && count == (r < 2 ? 67 : 66);
		next = start + count;
	}
	UNIT_OK(ok && next == 200, "batch 200 over 3 ranks: 67, 67, 66 in order");
	train_split(2, 3, 2, &start, &count);
	UNIT_OK(count == 0 && start == 2, "batch 2 over 3 ranks leaves rank 2 idle");
	UNIT_OK(train_epoch_steps(200, 64, 2) == 7, "2 epochs of 200 by 64: 7 steps");
	UNIT_OK(train_epoch_steps(200, 50, 1) == 4, "1 epoch of 200 by 50: 4 steps");
}

/* Per-step records grow with the steps run, zero-filled, keeping what
 * they held; a run asked for 10^8 steps does not begin by allocating
 * 10^8 records. */
static void
test_grow(void)
{
	long cap = 0, k;
	struct train_step *s = train_grow(NULL, &cap, 3, sizeof(*s)), *t;
	int ok = s != NULL && cap >= 4 && cap < 1000;

	for (k = 0; ok && k < 5000; k++) {
		if ((t = train_grow(s, &cap, k, sizeof(*s))) == NULL) {
			ok = 0;
			break;
		}
		s = t;
		ok &= s[k].step == 0 && s[k].loss == 0;
		s[k].step = k + 1;
	}
	for (k = 0; ok && k < 5000; k++)
		ok &= s[k].step == k + 1;
	UNIT_OK(ok && cap >= 5000 && cap < 10000,
	    "step records: zero-filled, kept, grown by doubling");
	free(s);
}

static void
test_layout(void)
{
	struct tensor_set s = { 0 }, back = { 0 };
	struct tensor a = { 0 }, b = { 0 };
	int64_t sa[2] = { 2, 3 }, sb[1] = { 2 };
	float *flat = NULL;
	size_t total = 0;
	char *layout = NULL, e[256], *other;
	int ok;

	tensor_init(&a, DT_F64, 2, sa, e, sizeof(e));
	tensor_init(&b, DT_F32, 1, sb, e, sizeof(e));
	for (int i = 0; i < 6; i++)
		((double *)a.data)[i] = i + 0.5;
	((float *)b.data)[0] = -1, ((float *)b.data)[1] = 7;
	s.format = TENSOR_SAFETENSORS;
	tensor_set_add(&s, "w", &a, e, sizeof(e));
	tensor_set_add(&s, "b", &b, e, sizeof(e));
	tensor_set_meta_put(&s, "collx.arch", "mlp", e, sizeof(e));
	UNIT_OK(tensor_set_flatten(&s, &flat, &total, &layout, e, sizeof(e)) == 0 &&
	    total == 8, "flatten: 8 values");
	UNIT_OK(flat[0] == -1 && flat[1] == 7 && flat[2] == 0.5f && flat[7] == 5.5f,
	    "flatten: tensors in name order, f64 converted");
	ok = tensor_set_unflatten(layout, flat, total, &back, e, sizeof(e)) == 0;
	UNIT_OK(ok && back.count == 2 && tensor_set_find(&back, "w")->shape[1] == 3 &&
	    ((float *)tensor_set_find(&back, "w")->data)[5] == 5.5f &&
	    strcmp(tensor_set_meta(&back, "collx.arch"), "mlp") == 0,
	    "unflatten: names, shapes, values and metadata back");
	tensor_set_free(&back);
	UNIT_OK(tensor_set_unflatten(layout, flat, total - 1, &back, e, sizeof(e)) < 0,
	    "unflatten refuses a vector of the wrong size");
	other = strdup("t\tb\t2\nt\tw\t2,3\nm\tx\ty\n");
	UNIT_OK(tensor_layout_same(layout, other), "layouts: metadata does not matter");
	other[strlen("t\tb\t2\nt\tw\t2,")] = '4';
	UNIT_OK(!tensor_layout_same(layout, other), "layouts: a shape does");
	free(other);
	free(flat);
	free(layout);
	tensor_set_free(&s);
	tensor_set_free(&back);
}

/* p -= 0.5 * mean gradient */
static void
half_step(void *ctx, float *p, const float *gsum, size_t off, size_t len,
    float scale)
{
	(void)ctx;
	(void)off;
	for (size_t i = 0; i < len; i++)
		p[i] -= 0.5f * gsum[i] * scale;
}

struct pusher {
	const char *addr;
	float g[4], p[4];
	double weight;
	int rc;
};

static void *
push_thread(void *arg)
{
	struct pusher *w = arg;
	struct ps_client *c;
	char e[256];

	w->rc = ps_client_open(&c, w->addr, -1, NULL, 10, NULL, NULL, e,
	    sizeof(e));
	if (w->rc == 0)
		w->rc = ps_client_push(c, w->g, w->weight, w->p, e, sizeof(e));
	if (w->rc == 0)
		w->rc = ps_client_done(c, e, sizeof(e));
	ps_client_close(c);
	return NULL;
}

static void *
serve_thread(void *arg)
{
	struct ps_server_cfg *cfg = arg;
	static char e[256];

	return ps_serve(cfg, e, sizeof(e)) == 0 ? NULL : e;
}

/* Junk and a half message: the server drops those connections and goes on. */
static void
garbage(const char *addr)
{
	char junk[64], e[256];
	int fd;

	memset(junk, 'x', sizeof(junk));
	fd = comm_sock_connect_hostport(addr, cli_now() + 5, e, sizeof(e));
	UNIT_OK(fd >= 0 && comm_sock_send_all(fd, junk, sizeof(junk), cli_now() + 5,
	    e, sizeof(e)) == 0, "junk sent to the server");
	close(fd);
	fd = comm_sock_connect_hostport(addr, cli_now() + 5, e, sizeof(e));
	UNIT_OK(fd >= 0 && comm_sock_send_all(fd, junk, 10, cli_now() + 5, e,
	    sizeof(e)) == 0, "half a header sent");
	close(fd);
}

static void
test_tcp_round(void)
{
	float shard[4] = { 1, 2, 3, 4 };
	volatile sig_atomic_t stop = 0;
	struct comm_sock_addr bound;
	char e[256], addr[64];
	struct ps_server_cfg cfg = {
		.index = 0, .nserv = 1, .total = 4, .shard = shard,
		.layout = "t\tp\t4\n", .workers = 2, .mode = PS_SYNC,
		.staleness = -1, .timeout = 10, .update = half_step, .stop = &stop
	};
	struct pusher w[2] = {
		{ .g = { 2, 2, 2, 2 }, .weight = 1 },
		{ .g = { 4, 0, 4, 0 }, .weight = 3 }
	};
	pthread_t st, pt[2];
	void *res;
	double t0;
	int silent;

	cfg.lfd = comm_sock_listen_hostport("127.0.0.1:0", &bound, e, sizeof(e));
	UNIT_OK(cfg.lfd >= 0, "listen");
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", comm_sock_addr_port(&bound));
	pthread_create(&st, NULL, serve_thread, &cfg);
	garbage(addr);
	silent = comm_sock_connect_hostport(addr, cli_now() + 5, e, sizeof(e));
	t0 = cli_now();
	for (int i = 0; i < 2; i++) {
		w[i].addr = addr;
		pthread_create(&pt[i], NULL, push_thread, &w[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(pt[i], NULL);
	pthread_join(st, &res);
	UNIT_OK(cli_now() - t0 < 5, "a silent connection holds nothing up");
	close(silent);
	close(cfg.lfd);
	UNIT_OK(w[0].rc == 0 && w[1].rc == 0 && res == NULL,
	    "two workers push, say done; the server ends");
	/* mean = (g0 + g1) / (1 + 3) = [1.5, 0.5, 1.5, 0.5] */
	UNIT_OK(shard[0] == 0.25f && shard[1] == 1.75f && shard[2] == 2.25f &&
	    shard[3] == 3.75f, "sync round: p - 0.5 * weighted mean");
	UNIT_OK(memcmp(w[0].p, shard, sizeof(shard)) == 0 &&
	    memcmp(w[1].p, shard, sizeof(shard)) == 0,
	    "both workers get the new values");
}

struct held {
	struct ps_client *c;
	float g[4], p[4];
	volatile int returned;
	int rc;
};

static void *
held_push(void *arg)
{
	struct held *h = arg;
	char e[256];

	h->rc = ps_client_push(h->c, h->g, 1, h->p, e, sizeof(e));
	h->returned = 1;
	return NULL;
}

/* Async, staleness 0: a worker's push is answered only once the slowest
 * connected worker has pushed as often. */
static void
test_staleness(void)
{
	float shard[4] = { 0, 0, 0, 0 };
	volatile sig_atomic_t stop = 0;
	struct comm_sock_addr bound;
	char e[256], addr[64];
	struct ps_server_cfg cfg = {
		.index = 0, .nserv = 1, .total = 4, .shard = shard,
		.layout = "t\tp\t4\n", .workers = 2, .mode = PS_ASYNC,
		.staleness = 0, .timeout = 10, .update = half_step, .stop = &stop
	};
	struct held a = { .g = { 2, 2, 2, 2 } };
	struct ps_client *b;
	float gb[4] = { 4, 4, 4, 4 }, pb[4];
	pthread_t st, at;
	int held, rc;

	cfg.lfd = comm_sock_listen_hostport("127.0.0.1:0", &bound, e, sizeof(e));
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", comm_sock_addr_port(&bound));
	pthread_create(&st, NULL, serve_thread, &cfg);
	rc = ps_client_open(&b, addr, 1, NULL, 10, NULL, NULL, e, sizeof(e));
	rc |= ps_client_open(&a.c, addr, 0, NULL, 10, NULL, NULL, e,
	    sizeof(e));
	UNIT_OK(rc == 0, "two async workers connect");
	pthread_create(&at, NULL, held_push, &a);
	usleep(300 * 1000);
	held = !a.returned;
	UNIT_OK(held, "worker 0, one push ahead of worker 1, is held");
	rc = ps_client_push(b, gb, 1, pb, e, sizeof(e));
	pthread_join(at, NULL);
	UNIT_OK(rc == 0 && a.rc == 0, "worker 1 pushes; both are answered");
	/* both pushes applied on arrival: 0 - 0.5*2 - 0.5*4 */
	UNIT_OK(shard[0] == -3 && a.p[3] == -3 && pb[1] == -3,
	    "async: each push applied by its own weight");
	ps_client_done(a.c, e, sizeof(e));
	ps_client_done(b, e, sizeof(e));
	ps_client_close(a.c);
	ps_client_close(b);
	pthread_join(st, NULL);
	close(cfg.lfd);
}

static void
test_colo_world1(void)
{
	struct comm_options o = { .rank = 0, .world = 1, .timeout = 5 };
	struct comm *c;
	float p[3] = { 1, 1, 1 }, g[3] = { 4, 8, 12 };
	char e[256];

	UNIT_OK(comm_open(&c, &o, e, sizeof(e)) == 0, "world of one");
	UNIT_OK(ps_colo_step(c, 1, p, g, 3, 4, half_step, NULL) == 0 &&
	    p[0] == 0.5f && p[1] == 0 && p[2] == -0.5f,
	    "colocated round on one rank divides by the weight");
	UNIT_OK(ps_colo_step(c, 2, p, g, 3, 4, half_step, NULL) < 0 &&
	    comm_errkind(c) == COMM_ERR_MISMATCH, "more servers than ranks refused");
	comm_close(c);
}

static void
test_optim_opts(void)
{
	struct trainopt_optim o = { .kind = "adamw", .betas = "0.8,0.99" };
	struct nn_optim_cfg c;
	char e[256];

	UNIT_OK(trainopt_optim_config(&o, &c, e, sizeof(e)) == 0 && c.kind == NN_ADAMW &&
	    c.lr == 1e-3 && c.weight_decay == 0.01 && c.beta1 == 0.8 &&
	    c.beta2 == 0.99 && c.eps == 1e-8, "adamw: torch defaults, betas given");
	o = (struct trainopt_optim){ .lr = "0.5", .momentum = "0.9" };
	UNIT_OK(trainopt_optim_config(&o, &c, e, sizeof(e)) == 0 && c.kind == NN_SGD &&
	    c.lr == 0.5 && c.momentum == 0.9 && c.weight_decay == 0,
	    "sgd: lr and momentum given");
	o = (struct trainopt_optim){ .betas = "0.9;0.99" };
	UNIT_OK(trainopt_optim_config(&o, &c, e, sizeof(e)) < 0 &&
	    strstr(e, "--betas") != NULL, "bad betas named in the error");
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_shards();
	test_split();
	test_grow();
	test_layout();
	test_optim_opts();
	test_tcp_round();
	test_staleness();
	test_colo_world1();
	return unit_done();
}
