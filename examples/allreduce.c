/*
 * allreduce: the smallest program on the installed library. Every rank
 * adds its rank + 1 into a vector; all end with W(W+1)/2 everywhere.
 *
 *   cc -o allreduce allreduce.c $(pkg-config --cflags --libs collx)
 *   collx-run -n 4 ./allreduce
 *
 * collx-run sets COLLX_RANK, COLLX_WORLD_SIZE and COLLX_MASTER.
 */
#include <stdio.h>
#include <stdlib.h>

#include <comm/coll.h>
#include <comm/comm.h>

#define N 1000

static int
env_int(const char *name, int def)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : def;
}

int
main(void)
{
	struct comm_options o = {
		.rank = env_int("COLLX_RANK", 0),
		.world = env_int("COLLX_WORLD_SIZE", 1),
		.master = getenv("COLLX_MASTER"),
		.timeout = 30,
		.token = getenv("COLLX_TOKEN"),
		.job = "example-allreduce",
	};
	static float x[N];
	struct comm *c;
	char err[512];
	int i, bad = 0;

	if (comm_open(&c, &o, err, sizeof err) < 0) {
		fprintf(stderr, "allreduce: %s\n", err);
		return 1;
	}
	for (i = 0; i < N; i++)
		x[i] = (float)(o.rank + 1);
	if (coll_allreduce(c, x, N, DT_F32, COLL_SUM, COLL_AUTO) < 0) {
		fprintf(stderr, "allreduce: %s\n", comm_error(c));
		comm_close(c);
		return 1;
	}
	for (i = 0; i < N; i++)
		bad += x[i] != (float)(o.world * (o.world + 1) / 2);
	printf("rank %d of %d: x[0] = %g, %d wrong\n", o.rank, o.world, x[0], bad);
	comm_close(c);
	return bad != 0;
}
