/* pyref.h: for the unit tests that ask an independent Python reference
 * (tests/NAME.py): where the script lies, the interpreter, and the verdict
 * of a run, whose exit 77 (torch missing) skips the case except under CI
 * (CI=true), so that a green CI means every case ran. */
#ifndef COLLX_PYREF_H
#define COLLX_PYREF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "nn/nn.h"
#include "unit.h"

static inline int
pyref_under_ci(void)
{
	const char *ci = getenv("CI");

	return ci != NULL && strcmp(ci, "true") == 0;
}

/* tests/name from tests/unit/X.c, the test's __FILE__. */
static inline void
pyref_script(char *buf, size_t len, const char *file, const char *name)
{
	const char *slash = strrchr(file, '/');

	snprintf(buf, len, "%.*s/../%s", slash ? (int)(slash - file) : 1,
	    slash ? file : ".", name);
}

/* COLLX_PYTHON, or the Debian interpreter, where python3-torch installs. */
static inline const char *
pyref_python(void)
{
	const char *p = getenv("COLLX_PYTHON");

	return p != NULL ? p : "/usr/bin/python3";
}

/* system()'s status rc of a reference run (77 << 8: its script absent):
 * 1 passed, 0 failed, -1 skipped, the skip line printed with what and
 * why. */
static inline int
pyref_verdict(int rc, const char *what, const char *why)
{
	if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77 && !pyref_under_ci()) {
		printf("ok %d - %s # skip %s\n", ++unit_n, what, why);
		return -1;
	}
	return WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

/* m's parameters, or with grads its gradients under the same names, as a
 * set, the summed loss (%.17g) in its metadata "loss_sum": 0 or -1. */
static inline int
pyref_model_set(struct nn_model *m, int grads, double loss,
    struct tensor_set *s, char *err, size_t errlen)
{
	float *keep = m->params;
	char v[64];
	int rc;

	if (grads)
		m->params = m->grads;
	rc = nn_model_to_set(m, s, err, errlen);
	m->params = keep;
	if (rc < 0)
		return -1;
	snprintf(v, sizeof(v), "%.17g", loss);
	if (tensor_set_meta_put(s, "loss_sum", v, err, errlen) < 0) {
		tensor_set_free(s);
		return -1;
	}
	return 0;
}

/* s saved as dir/file (its failure printed as a TAP comment), then freed:
 * 0 or -1. */
static inline int
pyref_save(const char *dir, const char *file, struct tensor_set *s)
{
	char path[600], err[256];
	int rc;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	rc = tensor_save(path, s, err, sizeof(err));
	if (rc < 0)
		printf("# %s: %s\n", path, err);
	tensor_set_free(s);
	return rc;
}

#endif
