/* launch_restart: restarting a job from its newest checkpoint: which file
 * the training program writes, whether this job wrote it, and PROGRAM's
 * words that resume from it; which failures are worth a restart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cli/cli.h"
#include "par/ckpt.h"
#include "prog/launch.h"

/* The value of option name (--name V or --name=V) at prog[k], or NULL;
 * *used: how many words it takes. */
static const char *
option_value(char *const *prog, int k, const char *name, int *used)
{
	size_t len = strlen(name);

	if (strncmp(prog[k], name, len) != 0)
		return NULL;
	if (prog[k][len] == '=') {
		*used = 1;
		return prog[k] + len + 1;
	}
	if (prog[k][len] == '\0' && prog[k + 1] != NULL) {
		*used = 2;
		return prog[k + 1];
	}
	return NULL;
}

static void
identity(struct launch_resume *r)
{
	struct stat st;

	r->existed = r->path != NULL && stat(r->path, &st) == 0;
	if (!r->existed)
		return;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	r->mtime = st.st_mtim;
	r->size = st.st_size;
}

void
launch_resume_init(struct launch_resume *r, const struct launch_job *j)
{
	const char *v;
	int k, used;

	memset(r, 0, sizeof *r);
	for (k = 1; j->prog[k] != NULL; k++)
		if ((v = option_value(j->prog, k, "--checkpoint", &used)) != NULL)
			break;
	if (j->prog[k] == NULL)
		return;
	r->at = k;
	r->arg = cli_subst(v, 0, j->n);
	r->path = j->wdir && r->arg[0] != '/' ?
	    cli_asprintf("%s/%s", j->wdir, r->arg) : cli_strdup(r->arg);
	identity(r);
}

void
launch_resume_free(struct launch_resume *r)
{
	free(r->arg);
	free(r->path);
	launch_words_free(r->argv);
	memset(r, 0, sizeof *r);
}

int
launch_resume_written(const struct launch_resume *r)
{
	struct launch_resume now = *r;

	if (r->path == NULL)
		return 0;
	identity(&now);
	return now.existed && (!r->existed || now.dev != r->dev ||
	    now.ino != r->ino || now.size != r->size ||
	    now.mtime.tv_sec != r->mtime.tv_sec ||
	    now.mtime.tv_nsec != r->mtime.tv_nsec);
}

char **
launch_resume_argv(char *const *prog, const struct launch_resume *r)
{
	char **argv = NULL;
	int n = 0, k, used;

	for (k = 0; prog[k] != NULL; k++) {
		if (k > 0 && option_value(prog, k, "--resume", &used) != NULL) {
			k += used - 1;
			continue;
		}
		if (k == r->at) {
			launch_words_push(&argv, &n, cli_strdup("--resume"));
			launch_words_push(&argv, &n, cli_strdup(r->arg));
		}
		launch_words_push(&argv, &n, cli_strdup(prog[k]));
	}
	return argv;
}

int
launch_resume_next(struct launch_resume *r, char ***prog, char *from,
    size_t len, char *err, size_t errlen)
{
	long step;

	if (r->arg == NULL) {
		snprintf(from, len, "as first started (no --checkpoint)");
		return 0;
	}
	if (!launch_resume_written(r)) {
		snprintf(from, len, "as first started (%s not written yet)",
		    r->arg);
		return 0;
	}
	if (ckpt_step_read(r->path, &step, err, errlen) < 0)
		return -1;
	if (r->argv == NULL)
		r->argv = launch_resume_argv(*prog, r);
	*prog = r->argv;
	snprintf(from, len, "from step %ld of %s", step, r->arg);
	return 0;
}

int
launch_restartable(int status)
{
	int code;

	if (WIFSIGNALED(status))
		return 1;
	code = WEXITSTATUS(status);
	return code != 0 && code != CLI_EXIT_USAGE && code != CLI_EXIT_DATA &&
	    code != CLI_EXIT_CHECK && code != 126 && code != 127;
}
