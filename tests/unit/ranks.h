/* ranks.h: the unit tests' one harness for a world of forked ranks: a
 * free loopback port for the rendezvous, ranks forked under an alarm (so
 * no test hangs), and their exit statuses collected. */
#ifndef COLLX_RANKS_H
#define COLLX_RANKS_H

#include <arpa/inet.h>
#include <stdio.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* A loopback TCP port nobody listens on now (the kernel's choice, then
 * released), of family AF_INET or AF_INET6; -1 when there is none. */
static inline int
unit_free_port(int family)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	int fd = socket(family, SOCK_STREAM, 0), port = -1;

	memset(&ss, 0, sizeof ss);
	ss.ss_family = (sa_family_t)family;
	if (family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	else
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&ss, family == AF_INET6 ?
	    sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		port = ntohs(family == AF_INET6 ?
		    ((struct sockaddr_in6 *)&ss)->sin6_port :
		    ((struct sockaddr_in *)&ss)->sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* A rank's failure said on standard error as a TAP comment: 1, its
 * exit code. */
static inline int
unit_rank_fail(int r, int line, const char *what)
{
	fprintf(stderr, "# rank %d: line %d: %s\n", r, line, what);
	return 1;
}

/* Rank r of world runs fn(r, world, arg); its return is its exit code. */
typedef int (*unit_rank_fn)(int rank, int world, void *arg);

/* Forks the ranks, each under an alarm of alarm_s seconds; pids in pid. */
static inline void
unit_fork_ranks(int world, int alarm_s, unit_rank_fn fn,
    void *arg, pid_t *pid)
{
	for (int r = 0; r < world; r++)
		if ((pid[r] = fork()) == 0) {
			alarm((unsigned)alarm_s);
			_exit(fn(r, world, arg));
		}
}

/* Forks the ranks as unit_fork_ranks does, each able to report on the
 * write end of a pipe, put in *report before the fork (fn's arg can carry
 * it): the read end, or -1. */
static inline int
unit_fork_reporting(int world, int alarm_s, unit_rank_fn fn, void *arg,
    int *report, pid_t *pid)
{
	int p[2];

	if (pipe(p) < 0)
		return -1;
	*report = p[1];
	unit_fork_ranks(world, alarm_s, fn, arg, pid);
	close(p[1]);
	return p[0];
}

/* Reads the ranks' reports to the end, each line echoed as a TAP comment
 * and kept in log (when not NULL, NUL-terminated); closes fd. */
static inline void
unit_echo_reports(int fd, char *log, size_t loglen)
{
	char buf[4096];
	size_t n = 0;
	ssize_t k;

	while ((k = read(fd, buf, sizeof buf - 1)) > 0) {
		buf[k] = '\0';
		if (log && n + (size_t)k < loglen) {
			memcpy(log + n, buf, (size_t)k);
			n += (size_t)k;
		}
		for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
			printf("# %s\n", l);
	}
	if (log)
		log[n < loglen ? n : loglen - 1] = '\0';
	close(fd);
}

/* Waits for every rank: st[r] (st may be NULL) its exit code, or 128 +
 * the signal that ended it. Returns how many did not exit 0. */
static inline int
unit_wait_ranks(int world, const pid_t *pid, int *st)
{
	int bad = 0, s, code;

	for (int r = 0; r < world; r++) {
		if (pid[r] < 0 || waitpid(pid[r], &s, 0) < 0)
			code = 255;
		else
			code = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
		if (st != NULL)
			st[r] = code;
		bad += code != 0;
	}
	return bad;
}

#endif
