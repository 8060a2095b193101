/* bench_sweep: the sweeps of collx-bench coll and p2p — every size (and
 * algorithm, or pair) in turn, a row printed by rank 0 as each is
 * measured, the progress line, and stopping together on Ctrl-C. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

int
bench_coll_sweep(struct comm *c, struct bench_coll *b, const struct bench_sizes *z,
    const enum coll_algo *algos, int nalgo, struct bench_out *out, int progress,
    long *wrong, char *err, size_t errlen)
{
	int w = comm_size(c), me = comm_rank(c), stop = 0;
	int forms = b->kind == COLL_KIND_ALLTOALLV ? 1 : 2;	/* no in place */
	struct bench_progress pr;
	struct bench_coll_row r;
	char what[128], sz[32];

	*wrong = 0;
	if ((b->hosts = bench_hosts(c)) < 0)
		return -1;
	if (me == 0 && bench_coll_begin(out, b, w, err, errlen) < 0)
		return -1;
	bench_progress_start(&pr, me == 0 && progress, nalgo * bench_count_sizes(z) * forms);
	for (int a = 0; a < nalgo && !stop; a++)
		for (size_t s = z->min; s != 0 && !stop; s = bench_next_size(z, s)) {
			if (bench_coll_count(b, s, w) == 0) {
				pr.done += forms;
				continue;
			}
			for (int inplace = 0; inplace < forms && !stop; inplace++) {
				snprintf(what, sizeof what, "%s %s %s", coll_algo_name(algos[a]),
				    bench_size_str(s, sz, sizeof sz), inplace ? "in place" :
				    "out of place");
				bench_progress_show(&pr, what);
				if (bench_coll_measure(c, b, algos[a], inplace, s,
				    &r) < 0)
					goto fail;
				pr.done++;
				if (r.wrong > 0)
					*wrong += r.wrong;
				if (me == 0) {
					bench_progress_end(&pr);
					if (bench_coll_print(out, b, w, &r, err, errlen) < 0)
						goto fail;
				}
				if ((stop = bench_agree_stop(c)) < 0)
					goto fail;
			}
		}
	bench_progress_end(&pr);
	if (me == 0 && bench_coll_end(out, stop, err, errlen) < 0)
		return -1;
	return stop;
fail:
	bench_out_close(out, NULL, 0);
	return -1;
}

int
bench_p2p_sweep(struct comm *c, struct bench_p2p *p, const struct bench_sizes *z,
    struct bench_out *out, int progress, char *err, size_t errlen)
{
	int w = comm_size(c), me = comm_rank(c), stop = 0, npairs, rc = -1;
	struct bench_p2p_row r, *mat;
	struct bench_progress pr;
	char what[96], sz[32];

	if ((p->hosts = bench_hosts(c)) < 0)
		return -1;
	npairs = p->a < 0 ? w * (w - 1) : 1;
	mat = cli_calloc((size_t)w * (size_t)w, sizeof *mat);
	if (me == 0 && bench_p2p_begin(out, p, w, err, errlen) < 0)
		goto out;
	bench_progress_start(&pr, me == 0 && progress, npairs * bench_count_sizes(z));
	for (int i = 0; i < w && !stop; i++)
		for (int j = 0; j < w && !stop; j++) {
			int a = p->a < 0 ? i : p->a, b = p->a < 0 ? j : p->b;

			if (a == b || (p->a >= 0 && (i > 0 || j > 0)))
				continue;
			for (size_t s = z->min; s != 0 && !stop; s = bench_next_size(z, s)) {
				snprintf(what, sizeof what, "%d->%d %s", a, b,
				    bench_size_str(s, sz, sizeof sz));
				bench_progress_show(&pr, what);
				if (bench_p2p_measure(c, p, a, b, s, &r) < 0)
					goto out;
				pr.done++;
				mat[a * w + b] = r;	/* the largest size's */
				if (me == 0) {
					bench_progress_end(&pr);
					if (bench_p2p_print(out, p, w, &r, err, errlen) < 0)
						goto out;
				}
				if ((stop = bench_agree_stop(c)) < 0)
					goto out;
			}
		}
	bench_progress_end(&pr);
	if (me == 0) {
		if (bench_out_close(out, err, errlen) < 0)
			goto out;
		if (!out->csv && p->a < 0 && !stop)
			bench_p2p_matrix(stdout, p, w, mat);
		if (stop)
			fprintf(out->csv ? stderr : stdout, "%sinterrupted after %d rows\n",
			    out->csv ? "collx-bench: " : "# ", out->rows);
	}
	rc = stop;
out:
	bench_out_close(out, NULL, 0);
	free(mat);
	return rc;
}
