/* launch_restart: restarting a job from its newest checkpoint: which file
 * the training program writes, whether this job wrote it, and PROGRAM's
 * words that resume from it; which failures are worth a restart; which
 * hosts still answer. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "par/ckpt.h"
#include "launch/launch.h"

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

/* Start the remote shell on host h running "true", its output nowhere, in
 * a process group of its own: its pid, or -1. */
static pid_t
probe_start(const struct launch_job *j, int h)
{
	char **argv = NULL;
	int n = 0, k, fd;
	pid_t pid;

	for (k = 0; j->ssh[k]; k++)
		launch_words_push(&argv, &n, cli_strdup(j->ssh[k]));
	launch_words_push(&argv, &n, cli_strdup(j->hosts.names[h]));
	launch_words_push(&argv, &n, cli_strdup("true"));
	if ((pid = fork()) == 0) {
		setpgid(0, 0);
		if ((fd = open("/dev/null", O_RDWR)) >= 0) {
			dup2(fd, STDIN_FILENO);
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	if (pid > 0)
		setpgid(pid, pid);	/* either side may win the race */
	launch_words_free(argv);
	return pid;
}

int
launch_hosts_probe(const struct launch_job *j, double timeout, int *up,
    char *err, size_t errlen)
{
	const struct launch_hosts *h = &j->hosts;
	pid_t *pid = cli_calloc((size_t)h->n, sizeof *pid);
	double end = cli_now() + timeout;
	int i, status, left = 0, rc = 0, late;
	pid_t r;

	for (i = 0; i < h->n; i++)
		up[i] = h->local[i];
	for (i = 0; i < h->n; i++) {
		if (up[i])
			continue;
		if ((pid[i] = probe_start(j, i)) < 0) {
			rc = cli_fail(err, errlen, "fork: %s", strerror(errno));
			break;
		}
		left++;
	}
	while (left > 0) {
		late = rc != 0 || cli_now() >= end;
		for (i = 0; i < h->n; i++) {
			if (pid[i] <= 0)
				continue;
			r = waitpid(pid[i], &status, WNOHANG);
			if (r == 0 && !late)
				continue;
			if (r == 0) {	/* no answer in time: lost */
				kill(-pid[i], SIGKILL);
				waitpid(pid[i], &status, 0);
			} else
				up[i] = r > 0 && WIFEXITED(status) &&
				    WEXITSTATUS(status) == 0;
			pid[i] = 0;
			left--;
		}
		if (left > 0)
			usleep(10000);
	}
	free(pid);
	return rc;
}

void
launch_hosts_keep(struct launch_hosts *h, const int *up)
{
	int i, kept = 0;

	for (i = 0; i < h->n; i++) {
		if (!up[i]) {
			free(h->names[i]);
			continue;
		}
		h->names[kept] = h->names[i];
		h->slots[kept] = h->slots[i];
		h->local[kept++] = h->local[i];
	}
	h->n = kept;
}
