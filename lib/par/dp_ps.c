/* dp_ps: data parallelism over a parameter server: connecting to
 * external servers, or starting this rank's colocated async server. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/util.h"
#include "comm/sock.h"
#include "par/dp_int.h"
#include "tensor/flat.h"

static int
model_layout(const struct nn_model *m, char **layout, char *err, size_t errlen)
{
	struct tensor_set s = { 0 };
	float *flat = NULL;
	size_t total;
	int rc;

	if (nn_model_to_set(m, &s, err, errlen) < 0)
		return -1;
	rc = tensor_set_flatten(&s, &flat, &total, layout, err, errlen);
	free(flat);
	tensor_set_free(&s);
	return rc;
}

/* Connect to the servers, check they hold this model, start from their
 * parameters. */
int
dp_ps_connect(struct dp_run *r, const char *addrs)
{
	char e[COLLX_ERRLEN], *mine = NULL;
	int rc;

	if (ps_client_open(&r->cl, addrs, r->rank, r->cfg->token,
	    r->cfg->timeout, r->cfg->note, NULL, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: parameter server: %s", e);
	if (model_layout(r->m, &mine, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: %s", e);
	rc = tensor_layout_same(mine, ps_client_layout(r->cl));
	free(mine);
	if (!rc || ps_client_total(r->cl) != r->m->nparams) {
		r->kind = TRAIN_ERR_DATA;
		return cli_fail(r->err, r->errlen, "rank %d: the parameter servers "
		    "%s hold another model (%zu parameters, this one %zu)",
		    r->rank, addrs, ps_client_total(r->cl), r->m->nparams);
	}
	if (ps_client_pull(r->cl, r->m->params, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: parameter server: %s", e);
	return 0;
}

static void *
colo_thread(void *arg)
{
	struct colo_server *s = arg;

	s->rc = ps_serve(&s->cfg, s->err, sizeof(s->err));
	return NULL;
}

static void colo_addr(struct dp_run *r, int j, int port, char *out, size_t len);

/* Colocated async mode: ranks 0..S-1 run a TCP server thread each. */
static int
colo_server_start(struct dp_run *r, int *port)
{
	const struct dp_cfg *cfg = r->cfg;
	struct colo_server *s = calloc(1, sizeof(*s));
	struct comm_sock_addr bound;
	size_t off, len;
	char e[COLLX_ERRLEN], hp[128];

	if (s == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	r->srv = s;
	s->cfg.lfd = -1;
	ps_shard(r->m->nparams, cfg->ps_servers, r->rank, &off, &len);
	s->shard = malloc((len + 1) * sizeof(float));
	if (s->shard == NULL || model_layout(r->m, &s->layout, e, sizeof(e)) < 0 ||
	    nn_optim_init(&s->opt, &cfg->optim, len, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: parameter server: %s",
		    s->shard ? e : "out of memory");
	memcpy(s->shard, r->m->params + off, len * sizeof(float));
	/* Listen where the mesh does (the chosen interface), not on every
	 * interface; a world of one has only loopback to offer. */
	colo_addr(r, r->rank, 0, hp, sizeof(hp));
	s->cfg.lfd = comm_sock_listen_hostport(hp, &bound, e, sizeof(e));
	if (s->cfg.lfd < 0)
		return dp_runtime_failed(r, "rank %d: parameter server: %s", e);
	*port = comm_sock_addr_port(&bound);
	s->cfg = (struct ps_server_cfg){
		.lfd = s->cfg.lfd, .index = r->rank, .nserv = cfg->ps_servers,
		.total = r->m->nparams, .shard = s->shard, .layout = s->layout,
		.workers = r->world, .mode = PS_ASYNC, .staleness = cfg->staleness,
		.timeout = cfg->timeout, .token = cfg->token,
		.update = dp_optim_update, .ctx = &s->opt, .stop = &s->stop
	};
	if (pthread_create(&s->thr, NULL, colo_thread, s) != 0)
		return dp_runtime_failed(r, "rank %d: %s", "cannot start the "
		    "parameter-server thread");
	s->started = 1;
	return 0;
}

/* "host:port" of colocated server j: its comm address with its PS port. */
static void
colo_addr(struct dp_run *r, int j, int port, char *out, size_t len)
{
	const char *a = comm_peer_addr(r->c, j), *colon = strrchr(a, ':');
	int hl = colon ? (int)(colon - a) : 0;

	if (hl == 0)
		snprintf(out, len, "127.0.0.1:%d", port);
	else
		snprintf(out, len, "%.*s:%d", hl, a, port);
}

int
dp_colo_async_start(struct dp_run *r)
{
	int S = r->cfg->ps_servers, j, rc;
	int32_t port = 0, *ports = calloc((size_t)r->world, sizeof(*ports));
	char *list = calloc((size_t)S, 160);
	size_t n = 0;

	if (ports == NULL || list == NULL) {
		rc = dp_runtime_failed(r, "rank %d: %s", "out of memory");
		goto out;
	}
	/* A failed start still joins the allgather, so no rank waits alone. */
	if (r->rank < S && colo_server_start(r, &port) < 0)
		port = -1;
	comm_set_step(r->c, "parameter-server addresses");
	if (coll_allgather(r->c, &port, ports, 1, DT_I32, COLL_AUTO) < 0) {
		rc = port < 0 ? -1 : dp_comm_failed(r);
		goto out;
	}
	for (j = 0; j < S; j++)
		if (ports[j] <= 0) {
			r->kind = TRAIN_ERR_RUNTIME;
			rc = port < 0 ? -1 : cli_fail(r->err, r->errlen, "rank %d: the "
			    "parameter server of rank %d failed to start", r->rank, j);
			goto out;
		}
	for (j = 0; j < S; j++) {
		colo_addr(r, j, ports[j], list + n, 160);
		n += strlen(list + n);
		list[n++] = j + 1 < S ? ',' : '\0';
	}
	rc = dp_ps_connect(r, list);
out:
	free(ports);
	free(list);
	return rc;
}

/* Colocated async server: wait for its end (every worker said done). */
int
dp_colo_server_stop(struct dp_run *r, int ok)
{
	struct colo_server *s = r->srv;
	int rc = 0;

	if (s == NULL)
		return 0;
	if (!ok)
		s->stop = 1;
	if (s->started) {
		pthread_join(s->thr, NULL);
		if (ok && s->rc < 0)
			rc = dp_runtime_failed(r, "rank %d: parameter server: %s",
			    s->err);
	}
	if (s->cfg.lfd >= 0)
		close(s->cfg.lfd);
	nn_optim_free(&s->opt);
	free(s->shard);
	free(s->layout);
	free(s);
	r->srv = NULL;
	return rc;
}

