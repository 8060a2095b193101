/*
 * test_collref: the --check reference of the collective programs, on three
 * forked ranks over 127.0.0.1. Every case gives each rank closed-form
 * inputs and a result written by hand from the closed form, once right
 * (collref_check must accept it) and once wrong (it must refuse it, saying
 * where), and, for floats, off by less than the tolerance (accepted).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog/collref.h"
#include "ranks.h"
#include "unit.h"

#define W 3

/* What one case checks; want_where is a substring of the refusal. */
struct verdict {
	const char *what;
	int want;			/* 0 accepted, 1 refused */
	const char *want_where;
};

static const struct verdict verdicts[] = {
	{ "allreduce f32 sum: right result accepted", 0, NULL },
	{ "allreduce f32 sum: one element off by 1 refused, named", 1, "element [2]" },
	{ "allreduce f32 sum: off by one ulp accepted", 0, NULL },
	{ "allreduce i8 sum wraps: 47 accepted", 0, NULL },
	{ "allreduce i8 sum: 48 refused (integers exact)", 1, "expected 47" },
	{ "allreduce bool max is or", 0, NULL },
	{ "allreduce i32 avg truncates toward zero", 0, NULL },
	{ "allreduce f64 min", 0, NULL },
	{ "broadcast from rank 1: root's values accepted", 0, NULL },
	{ "broadcast: a flipped bit refused", 1, "element [1]" },
	{ "allgather uneven rows accepted", 0, NULL },
	{ "allgather: a result of the wrong shape refused", 1, "result is" },
	{ "reduce-scatter: block r of the sum accepted", 0, NULL },
	{ "alltoall S=1 G=0 accepted", 0, NULL },
	{ "alltoall: chunks in the wrong order refused", 1, "element [" },
	{ "verdict: every rank learns rank 2 failed", 0, NULL },
};
#define NCASES (sizeof verdicts / sizeof verdicts[0])

static struct tensor
make(enum dtype dt, int ndim, const int64_t *shape)
{
	struct tensor t;
	char err[COLLX_ERRLEN];

	if (tensor_init(&t, dt, ndim, shape, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		_exit(2);
	}
	return t;
}

/* One case: 0 accepted, 1 refused (the message must hold where), -1 broken. */
static int
check(struct comm *c, enum coll_kind kind, enum coll_op op, const struct tensor *in,
    const struct tensor *out, const char *where)
{
	struct collref_spec s = { kind, op, 1, 1, 0, NULL };
	char err[512] = "";
	double e;
	int rc = collref_check(c, &s, in, out, &e, err, sizeof err);

	if (rc == 1 && where && !strstr(err, where))
		fprintf(stderr, "rank %d: '%s' lacks '%s'\n", comm_rank(c), err, where);
	return rc == 1 && where && !strstr(err, where) ? -1 : rc;
}

static void
case_f32(struct comm *c, int r, int *res)
{
	int64_t sh[1] = { 4 };
	struct tensor in = make(DT_F32, 1, sh), out = make(DT_F32, 1, sh);
	float *x = in.data, *y = out.data;

	for (int i = 0; i < 4; i++) {
		x[i] = (float)r + 0.5f * (float)i;
		y[i] = 3.0f + 1.5f * (float)i;	/* sum over r = 0, 1, 2 */
	}
	res[0] = check(c, COLL_KIND_ALLREDUCE, COLL_SUM, &in, &out, NULL);
	y[2] += 1;
	res[1] = check(c, COLL_KIND_ALLREDUCE, COLL_SUM, &in, &out, "element [2]");
	y[2] = nextafterf(6.0f, 7.0f);
	res[2] = check(c, COLL_KIND_ALLREDUCE, COLL_SUM, &in, &out, NULL);
	tensor_free(&in);
	tensor_free(&out);
}

static void
case_ints(struct comm *c, int r, int *res)
{
	int64_t sh[1] = { 3 };
	struct tensor a = make(DT_I8, 1, sh), b = make(DT_I8, 1, sh);
	struct tensor p = make(DT_BOOL, 1, sh), q = make(DT_BOOL, 1, sh);
	struct tensor m = make(DT_I32, 1, sh), n = make(DT_I32, 1, sh);

	for (int i = 0; i < 3; i++) {
		((int8_t *)a.data)[i] = (int8_t)(100 + r);	/* 303 wraps to 47 */
		((int8_t *)b.data)[i] = 47;
		((uint8_t *)p.data)[i] = r == i;
		((uint8_t *)q.data)[i] = 1;
		((int32_t *)m.data)[i] = 7 * r - 8;	/* sum -3, avg -1 */
		((int32_t *)n.data)[i] = -1;
	}
	res[3] = check(c, COLL_KIND_ALLREDUCE, COLL_SUM, &a, &b, NULL);
	((int8_t *)b.data)[1] = 48;
	res[4] = check(c, COLL_KIND_ALLREDUCE, COLL_SUM, &a, &b, "expected 47");
	res[5] = check(c, COLL_KIND_ALLREDUCE, COLL_MAX, &p, &q, NULL);
	res[6] = check(c, COLL_KIND_ALLREDUCE, COLL_AVG, &m, &n, NULL);
	tensor_free(&a), tensor_free(&b), tensor_free(&p);
	tensor_free(&q), tensor_free(&m), tensor_free(&n);
}

static void
case_min_bcast(struct comm *c, int r, int *res)
{
	int64_t sh[1] = { 2 };
	struct tensor in = make(DT_F64, 1, sh), out = make(DT_F64, 1, sh);
	double *x = in.data, *y = out.data;

	x[0] = -r, x[1] = r * 0.25;
	y[0] = -2, y[1] = 0;
	res[7] = check(c, COLL_KIND_ALLREDUCE, COLL_MIN, &in, &out, NULL);
	x[0] = 10 * r + 1, x[1] = 1.0 / 3;	/* root 1: 11, 1/3 */
	y[0] = 11, y[1] = 1.0 / 3;
	res[8] = check(c, COLL_KIND_BROADCAST, COLL_SUM, r == 1 ? &in : NULL, &out, NULL);
	y[1] = nextafter(y[1], 1);
	res[9] = check(c, COLL_KIND_BROADCAST, COLL_SUM, r == 1 ? &in : NULL, &out,
	    "element [1]");
	tensor_free(&in);
	tensor_free(&out);
}

/* Rank r holds r + 1 rows [10q + j, 10q + j]; the result stacks them. */
static void
case_allgather(struct comm *c, int r, int *res)
{
	int64_t sh[2] = { r + 1, 2 }, all[2] = { 6, 2 }, bad[2] = { 5, 2 };
	struct tensor in = make(DT_I16, 2, sh), out = make(DT_I16, 2, all);
	struct tensor wrong = make(DT_I16, 2, bad);
	int16_t *y = out.data;

	for (int j = 0; j <= r; j++)
		((int16_t *)in.data)[2 * j] = ((int16_t *)in.data)[2 * j + 1] =
		    (int16_t)(10 * r + j);
	for (int q = 0, row = 0; q < W; q++)
		for (int j = 0; j <= q; j++, row++)
			y[2 * row] = y[2 * row + 1] = (int16_t)(10 * q + j);
	res[10] = check(c, COLL_KIND_ALLGATHER, COLL_SUM, &in, &out, NULL);
	res[11] = check(c, COLL_KIND_ALLGATHER, COLL_SUM, &in, &wrong, "result is");
	tensor_free(&in), tensor_free(&out), tensor_free(&wrong);
}

static void
case_rs_a2a(struct comm *c, int r, int *res)
{
	int64_t sh[2] = { 6, 2 }, blk[2] = { 2, 2 }, ash[2] = { 2, 3 }, osh[2] = { 6, 1 };
	struct tensor in = make(DT_I64, 2, sh), out = make(DT_I64, 2, blk);
	struct tensor ain = make(DT_I32, 2, ash), aout = make(DT_I32, 2, osh);
	int32_t *y = aout.data, t;

	for (int i = 0; i < 12; i++)
		((int64_t *)in.data)[i] = (int64_t)(r + 1) * i;	/* sum: 6 i */
	for (int i = 0; i < 4; i++)
		((int64_t *)out.data)[i] = 6 * (4 * r + i);
	res[12] = check(c, COLL_KIND_REDUCE_SCATTER, COLL_SUM, &in, &out, NULL);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			((int32_t *)ain.data)[3 * i + j] = 100 * r + 10 * i + j;
	for (int q = 0; q < W; q++)	/* chunk r (column r) of rank q, stacked */
		for (int i = 0; i < 2; i++)
			y[2 * q + i] = 100 * q + 10 * i + r;
	res[13] = check(c, COLL_KIND_ALLTOALL, COLL_SUM, &ain, &aout, NULL);
	t = y[0], y[0] = y[2], y[2] = t;
	res[14] = check(c, COLL_KIND_ALLTOALL, COLL_SUM, &ain, &aout, "element [");
	tensor_free(&in), tensor_free(&out), tensor_free(&ain), tensor_free(&aout);
}

static void
rank_main(struct comm *c, int fd)
{
	int r = comm_rank(c), res[NCASES];
	char line[NCASES + 2];

	case_f32(c, r, res);
	case_ints(c, r, res);
	case_min_bcast(c, r, res);
	case_allgather(c, r, res);
	case_rs_a2a(c, r, res);
	res[15] = collref_verdict(c, r == 2) == 2 ? 0 : -1;
	for (size_t i = 0; i < NCASES; i++)
		line[i] = (char)('0' + (res[i] < 0 ? 9 : res[i]));
	line[NCASES] = '\n';
	if (write(fd, line, NCASES + 1) < 0)
		_exit(1);
}

/* A rank: join, run every case, one verdict digit per case on fd. */
struct collref_run {
	const char *master;
	int (*pipes)[2];
};

static int
collref_rank(int rank, int world, void *arg)
{
	const struct collref_run *run = arg;
	struct comm_options o = { .rank = rank, .world = world, .master = run->master,
	    .timeout = 20, .job = "test_collref" };
	struct comm *c;
	char err[512];

	if (comm_open(&c, &o, err, sizeof err) < 0) {
		fprintf(stderr, "rank %d: %s\n", rank, err);
		return 1;
	}
	rank_main(c, run->pipes[rank][1]);
	comm_close(c);
	return 0;
}

int
main(void)
{
	char master[64], line[W][NCASES + 8];
	pid_t pid[W];
	int p[W][2], ok;
	struct collref_run run = { master, p };

	snprintf(master, sizeof master, "127.0.0.1:%d", unit_free_port(AF_INET));
	for (int r = 0; r < W; r++)
		if (pipe(p[r]) < 0)
			return 1;
	unit_fork_ranks(W, 60, collref_rank, &run, pid);
	for (int r = 0; r < W; r++)
		close(p[r][1]);
	for (int r = 0; r < W; r++) {
		ssize_t n = read(p[r][0], line[r], sizeof line[r] - 1);

		line[r][n > 0 ? n : 0] = '\0';
	}
	ok = unit_wait_ranks(W, pid, NULL) == 0;
	UNIT_OK(ok, "three ranks ran every case and exited 0");
	for (size_t i = 0; i < NCASES; i++) {
		int good = 1;

		for (int r = 0; r < W; r++)
			good &= strlen(line[r]) > i && line[r][i] - '0' == verdicts[i].want;
		UNIT_OK(good, verdicts[i].what);
	}
	return unit_done();
}
