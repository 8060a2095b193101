/* test_launch: collx-run's library: host lists and where the ranks run,
 * what they are passed, how their processes start, their tagged output,
 * how they ended and which failure it names. */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "cli/cli.h"
#include "prog/join.h"
#include "launch/launch.h"
#include "launch/linetag.h"
#include "unit.h"

static char tmpdir[] = "/tmp/test_launch.XXXXXX";

static void
test_hosts(void)
{
	struct launch_hosts h = { 0 };
	char err[256];
	int host[8], local[8];

	UNIT_OK(launch_hostfile_parse(&h, "# cluster\n\nnode1 slots=2\n  node2   # two\r\n"
	    "user@node3 slots=1\n", "hf", err, sizeof err) == 0 && h.n == 3, "hostfile parsed");
	UNIT_OK(strcmp(h.names[1], "node2") == 0 && h.slots[0] == 2 && h.slots[1] == 1 &&
	    strcmp(h.names[2], "user@node3") == 0, "hostfile names and slots");
	UNIT_OK(launch_hosts_slots(&h, 0) == 4 && launch_hosts_slots(&h, 3) == 9,
	    "slot totals");
	launch_place(&h, 6, 0, host, local);
	UNIT_OK(host[0] == 0 && host[1] == 0 && host[2] == 1 && host[3] == 2 &&
	    host[4] == 0 && host[5] == 0 && local[4] == 2 && local[5] == 3 && local[3] == 0,
	    "placement by slots, wrapping");
	launch_place(&h, 5, 2, host, local);
	UNIT_OK(host[0] == 0 && host[1] == 0 && host[2] == 1 && host[3] == 1 && host[4] == 2 &&
	    local[3] == 1 && local[4] == 0, "--per-host blocks");
	UNIT_OK(strcmp(launch_host_addr(h.names[2]), "node3") == 0, "user@ stripped");
	launch_hosts_free(&h);

	launch_hosts_add_list(&h, "a,b,a", err, sizeof err);
	launch_place(&h, 7, 0, host, local);
	UNIT_OK(host[0] == 0 && host[1] == 1 && host[3] == 0 && host[6] == 0 &&
	    local[0] == 0 && local[2] == 1 && local[3] == 2 && local[5] == 3 && local[6] == 4,
	    "i mod H; a host named twice shares local ranks");
	launch_hosts_free(&h);

	UNIT_OK(launch_hostfile_parse(&h, "n1 slots=0\n", "hf", err, sizeof err) < 0 &&
	    strstr(err, "hf:1"), "slots=0 refused with line number");
	launch_hosts_free(&h);
	UNIT_OK(launch_hostfile_parse(&h, "n1\nn2 cores=3\n", "hf", err, sizeof err) < 0 &&
	    strstr(err, "hf:2"), "unknown field refused");
	launch_hosts_free(&h);
	UNIT_OK(launch_hostfile_parse(&h, "# only\n\n", "hf", err, sizeof err) < 0 &&
	    strstr(err, "no hosts"), "empty hostfile refused");
	launch_hosts_free(&h);
	UNIT_OK(launch_hosts_add_list(&h, "node1:2,user@node2,[fe80::1]:3,fe80::2",
	    err, sizeof err) == 0 && h.n == 4 && strcmp(h.names[0], "node1") == 0 &&
	    h.slots[0] == 2 && h.slots[1] == 1 && strcmp(h.names[2], "fe80::1") == 0 &&
	    h.slots[2] == 3 && strcmp(h.names[3], "fe80::2") == 0 && h.slots[3] == 1,
	    "-H host:K means K slots; a bare IPv6 address stays a name");
	launch_hosts_free(&h);
	UNIT_OK(launch_hostfile_parse(&h, "n1:3\nn2 slots=2\n", "hf", err, sizeof err) == 0 &&
	    h.n == 2 && strcmp(h.names[0], "n1") == 0 && h.slots[0] == 3 && h.slots[1] == 2,
	    "hostfile: host:K and host slots=K");
	launch_hosts_free(&h);
	UNIT_OK(launch_hosts_add_list(&h, "n1:0", err, sizeof err) < 0 &&
	    strstr(err, "slots"), "host:0 refused");
	launch_hosts_free(&h);
	UNIT_OK(launch_hosts_add_list(&h, "a,,b", err, sizeof err) < 0 &&
	    launch_hosts_add_list(&h, "-oProxyCommand=x", err, sizeof err) < 0,
	    "empty or option-like host refused");
	launch_hosts_free(&h);
}

/* An IPv4 address of an interface other than loopback, or "". */
static void
interface_ipv4(char *buf, size_t len)
{
	struct ifaddrs *ifs, *i;
	const struct sockaddr_in *sin;

	*buf = '\0';
	if (getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i && !*buf; i = i->ifa_next) {
		sin = (const struct sockaddr_in *)i->ifa_addr;
		if (sin && sin->sin_family == AF_INET &&
		    ((const unsigned char *)&sin->sin_addr)[0] != 127)
			inet_ntop(AF_INET, &sin->sin_addr, buf, (socklen_t)len);
	}
	freeifaddrs(ifs);
}

static void
test_hosts_local(void)
{
	struct launch_hosts h = { 0 };
	char *prog[] = { "prog", NULL };
	struct launch_job j = { .n = 4, .prog = prog };
	char err[256], self[256] = "", list[700], addr[64], want[300];
	int host[8], local[8], world[8], ok;

	if (gethostname(self, sizeof self - 1) < 0)
		strcpy(self, "localhost");
	snprintf(list, sizeof list, "localhost,node1,127.0.0.2,::1,%s,me@localhost,"
	    "[::ffff:127.0.0.1],LocalHost,192.0.2.1", self);
	UNIT_OK(launch_hosts_add_list(&h, list, err, sizeof err) == 0 && h.n == 9,
	    "hosts parsed");
	UNIT_OK(h.local[0] && !h.local[1] && h.local[2] && h.local[3] && h.local[4] &&
	    !h.local[5] && h.local[6] && h.local[7] && !h.local[8],
	    "loopback names and addresses and the host name are this machine; "
	    "user@localhost and others are not");
	UNIT_OK(!launch_hosts_all_local(&h), "not all local");
	UNIT_OK(launch_hosts_add_list(&h, "node2,localhost", err,
	    sizeof err) == 0 && h.local[0] && !h.local[8] && !h.local[9] &&
	    h.local[10], "a second list keeps the first's marks and marks its own");
	launch_hosts_free(&h);
	interface_ipv4(addr, sizeof addr);
	if (*addr) {
		launch_hosts_add_list(&h, addr, err, sizeof err);
		UNIT_OK(h.local[0], "an interface's address is this machine");
		launch_hosts_free(&h);
	}

	launch_hosts_add_list(&h, "localhost,127.0.0.1,node1", err, sizeof err);
	launch_place(&h, 6, 0, host, local);
	launch_local_worlds(&h, 6, host, local, world);
	UNIT_OK(local[0] == 0 && local[1] == 1 && local[2] == 0 && local[3] == 2 &&
	    local[4] == 3 && local[5] == 1 && world[0] == 4 && world[1] == 4 &&
	    world[2] == 2, "two names of this machine share its local ranks");
	launch_hosts_free(&h);

	launch_hosts_add_list(&j.hosts, "localhost,127.0.0.1:3", err, sizeof err);
	ok = launch_job_prepare(&j, err, sizeof err) == 0;
	UNIT_OK(ok && launch_hosts_all_local(&j.hosts) &&
	    strncmp(j.master, "127.0.0.1:", 10) == 0 &&
	    strcmp(j.master, "127.0.0.1:29500") != 0 && j.cwd == NULL,
	    "only this machine: a free port on 127.0.0.1, as without hosts");
	j.prog = NULL;
	launch_job_free(&j);
	j = (struct launch_job){ .n = 2, .prog = prog };
	launch_hosts_add_list(&j.hosts, "localhost,node1", err, sizeof err);
	ok = launch_job_prepare(&j, err, sizeof err) == 0;
	snprintf(want, sizeof want, "%s:29500", self);
	UNIT_OK(ok && strcmp(j.master, want) == 0, "beside a remote host, the "
	    "rendezvous is this machine's name, not its loopback");
	j.prog = NULL;
	launch_job_free(&j);
}

/* What a POSIX shell makes of quoted words: printf each in brackets. */
static void
test_quoting(void)
{
	static const char *const words[] = { "plain", "a b", "it's", "$HOME",
	    "`x`", "\"q\"", "*", "", "a\nb", "x=1", "--", "\\", NULL };
	char cmd[1024] = "printf '[%s]' ", got[512], want[512] = "", *q;
	char **v, err[128];
	FILE *p;
	size_t n;
	int i, c;

	for (i = 0; words[i]; i++) {
		q = launch_shquote(words[i]);
		strcat(cmd, q);
		strcat(cmd, " ");
		free(q);
		snprintf(want + strlen(want), sizeof want - strlen(want), "[%s]", words[i]);
	}
	p = popen(cmd, "r");
	n = fread(got, 1, sizeof got - 1, p);
	got[n] = '\0';
	pclose(p);
	UNIT_OK(strcmp(got, want) == 0, "shquote survives sh");
	q = launch_shquote("ok/path-1.npy");
	UNIT_OK(strcmp(q, "ok/path-1.npy") == 0, "safe words stay bare");
	free(q);

	UNIT_OK(launch_split_words("  ssh -o 'Opt=a b' \"x\\\"y\" z\\ w ", &v, &c, err,
	    sizeof err) == 0 && c == 5 && strcmp(v[0], "ssh") == 0 &&
	    strcmp(v[2], "Opt=a b") == 0 && strcmp(v[3], "x\"y") == 0 &&
	    strcmp(v[4], "z w") == 0 && v[5] == NULL, "split words");
	launch_words_free(v);
	UNIT_OK(launch_split_words("ssh 'open", &v, &c, err, sizeof err) < 0 &&
	    launch_split_words("   ", &v, &c, err, sizeof err) < 0,
	    "unbalanced or empty command refused");
}


/* Whether r[0..n-1] are the ranks want (host, local rank, world each). */
static int
ranks_are(const struct launch_rank *r, int n, const int want[][3])
{
	int i;

	for (i = 0; i < n; i++)
		if (r[i].host != want[i][0] || r[i].local_rank != want[i][1] ||
		    r[i].local_world != want[i][2])
			return 0;
	return 1;
}

static void
test_place_ranks(void)
{
	static const int alone[3][3] = { { -1, 0, 3 }, { -1, 1, 3 },
	    { -1, 2, 3 } };
	/* Host 0 (this machine) takes 1 rank a visit, host 1 two. */
	static const int slots[7][3] = { { -1, 0, 3 }, { 1, 0, 4 }, { 1, 1, 4 },
	    { -1, 1, 3 }, { 1, 2, 4 }, { 1, 3, 4 }, { -1, 2, 3 } };
	static const int blocks[5][3] = { { -1, 0, 3 }, { -1, 1, 3 },
	    { -1, 2, 3 }, { 1, 0, 2 }, { 1, 1, 2 } };
	struct launch_hosts h = { 0 };
	struct launch_rank r[7];
	char err[256];

	launch_place_ranks(&h, 3, 0, r);
	UNIT_OK(ranks_are(r, 3, alone), "without hosts every rank is local, "
	    "rank i of n on this machine");
	UNIT_OK(launch_hosts_add_list(&h, "localhost,192.0.2.1:2", err,
	    sizeof err) == 0, "hosts parsed");
	launch_place_ranks(&h, 7, 0, r);
	UNIT_OK(ranks_are(r, 7, slots), "by slots: localhost's ranks local, "
	    "the other host's remote, each counted on its host");
	launch_place_ranks(&h, 5, 3, r);
	UNIT_OK(ranks_are(r, 5, blocks), "--per-host 3: blocks of three");
	launch_hosts_free(&h);
}

/* Index of w in NULL-terminated v, or -1. */
static int
word_at(char *const *v, const char *w)
{
	for (int i = 0; v[i]; i++)
		if (strcmp(v[i], w) == 0)
			return i;
	return -1;
}

#define has_word(v, w) (word_at((v), (w)) >= 0)

static void
test_job_local(void)
{
	char *prog[] = { "prog", "-o", "out.{rank}", NULL };
	struct launch_job j = { .n = 2, .prog = prog };
	struct launch_rank r = { -1, 1, 2 };
	char err[256], want[64], host[64], **env, **argv;
	int port, lo = 32768, hi = 60999;
	FILE *f;

	unsetenv("COLLX_JOB_ID");
	unsetenv("COLLX_TOKEN");
	unsetenv("COLLX_TIMEOUT");
	UNIT_OK(launch_job_prepare(&j, err, sizeof err) == 0, "local job prepared");
	if ((f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) != NULL) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768, hi = 60999;
		fclose(f);
	}
	UNIT_OK(cli_hostport_parse(j.master, host, sizeof host, &port) == 0 &&
	    strcmp(host, "127.0.0.1") == 0 && port >= 1024 && (port < lo || port > hi),
	    "master on 127.0.0.1, outside the kernel's ephemeral range");
	UNIT_OK(j.torch_port != port && strcmp(j.torch_addr, "127.0.0.1") == 0,
	    "PyTorch's store on another port");
	UNIT_OK(strlen(j.job_id) == 32 && strspn(j.job_id, "0123456789abcdef") == 32,
	    "a random job id of 32 hex digits");
	env = launch_rank_env(&j, 1, &r);
	snprintf(want, sizeof want, "COLLX_MASTER=%s", j.master);
	UNIT_OK(has_word(env, "COLLX_RANK=1") && has_word(env, "COLLX_WORLD_SIZE=2") &&
	    has_word(env, "RANK=1") && has_word(env, "LOCAL_RANK=1") &&
	    has_word(env, "LOCAL_WORLD_SIZE=2") && has_word(env, want),
	    "collx's and torchrun's variables");
	snprintf(want, sizeof want, "MASTER_PORT=%d", j.torch_port);
	UNIT_OK(has_word(env, want) && has_word(env, "MASTER_ADDR=127.0.0.1"),
	    "MASTER_ADDR and MASTER_PORT");
	argv = launch_rank_argv(&j, 1, &r, env);
	UNIT_OK(strcmp(argv[0], "prog") == 0 && strcmp(argv[2], "out.1") == 0 &&
	    argv[3] == NULL, "a local rank runs PROGRAM itself, {rank} filled in");
	launch_words_free(argv);
	launch_words_free(env);
	j.prog = NULL;
	launch_job_free(&j);
}

static void
test_job_remote(void)
{
	char *prog[] = { "prog", "in x.npy", NULL }, **env, **argv, err[256];
	struct launch_job j = { .n = 3, .prog = prog, .wdir = "/w d" };
	struct launch_rank r = { 1, 0, 1 };
	int c, at;

	setenv("COLLX_JOB_ID", "abc-123", 1);
	setenv("COLLX_TOKEN", "secret", 1);
	UNIT_OK(launch_hosts_add_list(&j.hosts, "node1,user@node2", err, sizeof err) == 0 &&
	    launch_split_words("ssh -x", &j.ssh, &c, err, sizeof err) == 0 &&
	    launch_job_prepare(&j, err, sizeof err) == 0, "remote job prepared");
	UNIT_OK(strcmp(j.master, "node1:29500") == 0 && j.torch_port == 29501 &&
	    strcmp(j.job_id, "abc-123") == 0, "first host on 29500, store on 29501, "
	    "the caller's job id");
	env = launch_rank_env(&j, 1, &r);
	UNIT_OK(!has_word(env, "COLLX_TOKEN=secret") && has_word(env, "COLLX_RANK=1"),
	    "a remote rank's token stays off its command line");
	argv = launch_rank_argv(&j, 1, &r, env);
	at = word_at(argv, "cd");
	UNIT_OK(strcmp(argv[0], "ssh") == 0 && strcmp(argv[1], "-x") == 0 &&
	    strcmp(argv[2], "user@node2") == 0 && at == 3 &&
	    strcmp(argv[4], "'/w d'") == 0 && strcmp(argv[5], "&&") == 0 &&
	    strcmp(argv[6], "sh") == 0 && strcmp(argv[7], "-c") == 0,
	    "ssh HOST cd DIR && sh -c (reads the token)");
	at = word_at(argv, "prog");
	UNIT_OK(at > 0 && strcmp(argv[at + 1], "'in x.npy'") == 0 && argv[at + 2] == NULL &&
	    has_word(argv, "COLLX_RANK=1"), "variables and PROGRAM quoted for the remote shell");
	launch_words_free(argv);
	launch_words_free(env);
	r.host = -1;
	env = launch_rank_env(&j, 0, &r);
	UNIT_OK(has_word(env, "COLLX_TOKEN=secret"), "a local rank gets the token");
	launch_words_free(env);
	unsetenv("COLLX_JOB_ID");
	unsetenv("COLLX_TOKEN");
	j.prog = NULL;
	launch_job_free(&j);
}

static void
test_exec_why(void)
{
	char path[160], tool[128], why[256];
	char *env[] = { path, NULL };
	FILE *f;

	snprintf(tool, sizeof tool, "%s/tool", tmpdir);
	if ((f = fopen(tool, "w")) != NULL)
		fclose(f);
	snprintf(path, sizeof path, "PATH=/nonexistent:%s", tmpdir);
	launch_exec_why("tool", ENOENT, env, NULL, why, sizeof why);
	UNIT_OK(strcmp(why, "cannot execute tool: No such file or directory") == 0,
	    "on the rank's PATH but not executable there (its interpreter): "
	    "the system's reason");
	snprintf(path, sizeof path, "PATH=/nonexistent");
	launch_exec_why("tool", ENOENT, env, tmpdir, why, sizeof why);
	UNIT_OK(strcmp(why, "cannot execute tool: not found on PATH (for the file "
	    "in this directory, say ./tool; it is not executable: chmod +x it, "
	    "or name its interpreter)") == 0, "./ suggested for a file where the "
	    "rank starts");
	launch_exec_why("tool", ENOENT, env, "/nonexistent", why, sizeof why);
	UNIT_OK(strcmp(why, "cannot execute tool: not found on PATH") == 0,
	    "no such file where the rank starts");
	launch_exec_why("./tool", EACCES, env, NULL, why, sizeof why);
	UNIT_OK(strcmp(why, "cannot execute ./tool: Permission denied") == 0,
	    "a path: the system's reason");
}

static void
test_export(void)
{
	struct launch_job j = { 0 };
	char err[256];

	setenv("TL_FROM_HERE", "a b", 1);
	unsetenv("TL_UNSET");
	UNIT_OK(launch_job_export(&j, "TL_FROM_HERE", err, sizeof err) == 0 &&
	    launch_job_export(&j, "X_1=", err, sizeof err) == 0 &&
	    launch_job_export(&j, "_y=1=2", err, sizeof err) == 0 &&
	    j.nexports == 3 && strcmp(j.exports[0], "TL_FROM_HERE=a b") == 0 &&
	    strcmp(j.exports[1], "X_1=") == 0 &&
	    strcmp(j.exports[2], "_y=1=2") == 0,
	    "NAME takes its value here; NAME=VALUE as given");
	UNIT_OK(launch_job_export(&j, "1X=2", err, sizeof err) < 0 &&
	    strcmp(err, "invalid variable name in '1X=2'") == 0 &&
	    launch_job_export(&j, "=2", err, sizeof err) < 0 &&
	    launch_job_export(&j, "A-B=2", err, sizeof err) < 0 &&
	    launch_job_export(&j, "", err, sizeof err) < 0 && j.nexports == 3,
	    "names that are no variable's refused");
	UNIT_OK(launch_job_export(&j, "LOCAL_RANK=0", err, sizeof err) < 0 &&
	    strcmp(err, "LOCAL_RANK is set by test_launch for each rank")
	    == 0 &&
	    launch_job_export(&j, "COLLX_MASTER", err, sizeof err) < 0 &&
	    launch_job_export(&j, "MASTER_ADDR=h", err, sizeof err) == 0,
	    "what each rank is given by the launcher refused; MASTER_ADDR not");
	UNIT_OK(launch_job_export(&j, "TL_UNSET", err, sizeof err) < 0 &&
	    strcmp(err, "TL_UNSET is not set") == 0 && j.nexports == 4,
	    "NAME unset here refused");
	launch_job_free(&j);
}

/* What a started rank did: launch_spawn's result, its process, what it
 * wrote on each stream and its wait status. */
struct ran {
	int rc, status;
	pid_t pid;
	char out[512], err[512];
};

/* Everything on fd until end of file, in buf. */
static void
slurp(int fd, char *buf, size_t len)
{
	size_t off = 0;
	ssize_t n;

	while (off < len - 1 && (n = read(fd, buf + off, len - 1 - off)) > 0)
		off += (size_t)n;
	buf[off] = '\0';
	close(fd);
}

/* Start rank i of j at r and wait for it. With in, standard input is a
 * pipe holding it (as when the launcher's own input is a pipe). */
static void
start(struct ran *w, const struct launch_job *j, int i,
    const struct launch_rank *r, char **env, char **argv, const char *in,
    void (*setup)(void))
{
	struct launch_child c = { .no_input = -1, .out = -1, .err = -1,
	    .setup = setup };
	int none[2], out[2], err[2], feed[2], saved = dup(STDIN_FILENO);

	memset(w, 0, sizeof *w);
	if (pipe2(none, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(err, O_CLOEXEC) < 0 || pipe(feed) < 0) {
		w->rc = -2;
		return;
	}
	close(none[1]);
	if (write(feed[1], in ? in : "", in ? strlen(in) : 0) < 0)
		w->rc = -2;
	close(feed[1]);
	dup2(feed[0], STDIN_FILENO);
	close(feed[0]);
	c.no_input = none[0];
	c.out = out[1];
	c.err = err[1];
	w->rc = launch_spawn(j, i, r, env, argv, &c, &w->pid, w->err,
	    sizeof w->err);
	dup2(saved, STDIN_FILENO);
	close(saved);
	close(none[0]);
	close(out[1]);
	close(err[1]);
	slurp(out[0], w->out, sizeof w->out);
	if (w->rc == 0)
		slurp(err[0], w->err, sizeof w->err);
	else
		close(err[0]);
	if (w->pid <= 0 || waitpid(w->pid, &w->status, 0) != w->pid)
		w->status = -1;
}

/* Whether w ran to an exit with code and rc from launch_spawn. */
static int
exited(const struct ran *w, int rc, int code)
{
	return w->rc == rc && w->status != -1 && WIFEXITED(w->status) &&
	    WEXITSTATUS(w->status) == code;
}

static void
set_marker(void)
{
	setenv("TL_SETUP", "ran", 1);
}

static void
test_spawn_local(void)
{
	char *env[] = { "TL_VAR=x y", NULL };
	char *argv[] = { "sh", "-c", "echo \"$TL_VAR\" $TL_SETUP; "
	    "read -r pid comm state ppid pgrp rest </proc/$$/stat; "
	    "[ $pid = $pgrp ] && echo own group; cat; echo eof; "
	    "echo to err >&2; exit 3", NULL };
	struct launch_job j = { .n = 2 };
	struct launch_rank r = { -1, 1, 2 };
	struct ran w;

	start(&w, &j, 1, &r, env, argv, "launcher's input\n", set_marker);
	UNIT_OK(exited(&w, 0, 3) &&
	    strcmp(w.out, "x y ran\nown group\neof\n") == 0 &&
	    strcmp(w.err, "to err\n") == 0, "a local rank: its variables, the "
	    "setup run in it, its own process group, no input but rank 0's, "
	    "its streams and status");
	UNIT_OK(getenv("TL_VAR") == NULL && getenv("TL_SETUP") == NULL,
	    "the launcher's environment untouched");
	start(&w, &j, 0, &r, env, argv, "launcher's input\n", NULL);
	UNIT_OK(exited(&w, 0, 3) && strcmp(w.out, "x y\nown group\n"
	    "launcher's input\neof\n") == 0,
	    "rank 0 reads the launcher's input");
	j.wdir = "/";
	argv[2] = "pwd";
	start(&w, &j, 1, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "/\n") == 0, "in --wdir");
	j.wdir = "/nonexistent/tl";
	start(&w, &j, 1, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 0, 1) && w.out[0] == '\0' && strcmp(w.err,
	    "test_launch: --wdir: /nonexistent/tl: No such file or directory\n")
	    == 0, "a missing --wdir: the child says so and exits 1");
}

static void
test_spawn_remote(void)
{
	char *env[] = { "TL_VAR=local only", NULL };
	char *argv[] = { "sh", "-c", "echo \"${TL_VAR-unset}\"; cat", NULL };
	struct launch_job j = { .n = 2, .wdir = "/nonexistent/tl" };
	struct launch_rank r = { 0, 0, 1 };
	struct ran w;

	setenv("COLLX_TOKEN", "s3cret", 1);
	start(&w, &j, 1, &r, env, argv, "launcher's input\n", NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "unset\ns3cret\n") == 0,
	    "a remote rank: its remote shell reads the token's line, then "
	    "nothing; variables and directory are the command line's");
	start(&w, &j, 0, &r, env, argv, "launcher's input\n", NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "unset\ns3cret\n"
	    "launcher's input\n") == 0, "rank 0: the token's line, then the "
	    "launcher's input");
	unsetenv("COLLX_TOKEN");
	start(&w, &j, 1, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "unset\n") == 0,
	    "no token: nothing to read");
}

static void
test_spawn_fails(void)
{
	char file[64];
	char *env[] = { "PATH=/nonexistent", NULL };
	char *argv[] = { "tl-no-such-program", NULL };
	struct launch_job j = { .n = 1 };
	struct launch_rank r = { -1, 0, 1 };
	char want[128];
	struct ran w;
	int fd;

	start(&w, &j, 0, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 127, 127) && strcmp(w.err, "cannot execute "
	    "tl-no-such-program: not found on PATH") == 0,
	    "not found: 127, the rank's PATH searched");
	snprintf(file, sizeof file, "%s/plain", tmpdir);
	if ((fd = open(file, O_WRONLY | O_CREAT, 0644)) >= 0)
		close(fd);
	argv[0] = file;
	start(&w, &j, 0, &r, env, argv, NULL, NULL);
	snprintf(want, sizeof want, "cannot execute %s: Permission denied",
	    file);
	UNIT_OK(fd >= 0 && exited(&w, 126, 126) && strcmp(w.err, want) == 0,
	    "not executable: 126 and the system's reason");
	unlink(file);
}

static void
test_linetag(void)
{
	struct linetag t;
	char err[256], out[256];
	int to[2], w;
	ssize_t n;

	UNIT_OK(pipe(to) == 0 && linetag_open(&t, 3, to[1], &w, err, sizeof err) == 0,
	    "linetag opened");
	UNIT_OK(write(w, "one\ntw", 6) == 6, "rank writes");
	linetag_read(&t);
	UNIT_OK(write(w, "o\nthree", 7) == 7, "rank writes more");
	close(w);
	while (t.fd >= 0)
		linetag_read(&t);
	close(to[1]);
	n = read(to[0], out, sizeof out - 1);
	out[n > 0 ? n : 0] = '\0';
	close(to[0]);
	UNIT_OK(strcmp(out, "[3] one\n[3] two\n[3] three\n") == 0,
	    "whole lines tagged, the unfinished last one ended");
}

static int made_ok = 1;	/* every status ended() made is as asked */

/* A real wait status, from a child that exits with code or, when sig is
 * nonzero, is killed by sig (without a core file). */
static int
ended(int code, int sig)
{
	struct rlimit none = { 0, 0 };
	int status = -1;
	pid_t pid;

	if ((pid = fork()) == 0) {
		setrlimit(RLIMIT_CORE, &none);
		if (sig) {
			signal(sig, SIG_DFL);
			raise(sig);
		}
		_exit(code);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid ||
	    (sig ? !WIFSIGNALED(status) || WTERMSIG(status) != sig :
	    !WIFEXITED(status) || WEXITSTATUS(status) != code))
		made_ok = 0;
	return status;
}

#define EXITED(code) ended((code), 0)
#define KILLED(sig) ended(0, (sig))

static void
test_statuses(void)
{
	static const int outside[] = { SIGKILL, SIGTERM, SIGINT, SIGHUP,
	    SIGQUIT };
	/* Crashes a sanitizer does not catch first. */
	static const int inside[] = { SIGABRT, SIGUSR1, SIGPIPE, SIGALRM };
	size_t k;
	int all = 1;

	UNIT_OK(!launch_status_failed(EXITED(0)) &&
	    launch_status_failed(EXITED(1)) &&
	    launch_status_failed(EXITED(255)) &&
	    launch_status_failed(KILLED(SIGTERM)),
	    "a failure: a nonzero exit or any signal");
	for (k = 0; k < sizeof outside / sizeof outside[0]; k++)
		all &= launch_killed_from_outside(KILLED(outside[k]));
	UNIT_OK(all, "KILL, TERM, INT, HUP and QUIT come from outside");
	all = 1;
	for (k = 0; k < sizeof inside / sizeof inside[0]; k++)
		all &= !launch_killed_from_outside(KILLED(inside[k]));
	UNIT_OK(all && !launch_killed_from_outside(EXITED(0)) &&
	    !launch_killed_from_outside(EXITED(137)) &&
	    !launch_killed_from_outside(EXITED(143)),
	    "a crash or an exit (even with 128+N) does not");
}

/* A table of four ranks with processes 101..104, all running. */
static void
table(struct launch_ends *e)
{
	int i;

	launch_ends_init(e, 4);
	for (i = 0; i < 4; i++)
		e->rank[i].pid = 101 + i;
}

static void
test_died(void)
{
	struct launch_ends e;

	table(&e);
	launch_ends_died(&e, 103);
	launch_ends_died(&e, 101);
	launch_ends_died(&e, 103);
	launch_ends_died(&e, 999);
	UNIT_OK(e.rank[2].died == 1 && e.rank[0].died == 2 &&
	    e.rank[1].died == 0 && e.rank[3].died == 0 && e.deaths == 2,
	    "deaths numbered as signalled, "
	    "once each; an unknown process (an orphan reaped) none");
	UNIT_OK(launch_ends_reaped(&e, 102, 7) == 1 &&
	    e.rank[1].state == LAUNCH_REAPED &&
	    e.rank[1].status == 7 && launch_ends_reaped(&e, 102, 9) == -1 &&
	    e.rank[1].status == 7 && launch_ends_reaped(&e, 999, 0) == -1,
	    "a status recorded for its rank, once");
	launch_ends_free(&e);
}

static void
test_number(void)
{
	struct launch_ends e;

	table(&e);
	e.rank[3].died = e.deaths = 1;	/* its SIGCHLD came */
	launch_ends_reaped(&e, 101, EXITED(1));
	launch_ends_reaped(&e, 102, KILLED(SIGTERM));
	launch_ends_reaped(&e, 104, EXITED(0));
	launch_ends_reaped(&e, 103, KILLED(SIGKILL));
	launch_ends_number(&e);
	UNIT_OK(e.rank[3].died == 1 && e.rank[1].died == 2 &&
	    e.rank[2].died == 3 && e.rank[0].died == 4 && e.deaths == 4,
	    "unnumbered deaths: killed from "
	    "outside first, then the rest, in rank order; a numbered one kept");
	launch_ends_free(&e);

	table(&e);
	e.rank[0].state = LAUNCH_RUNNING;
	e.rank[1].state = LAUNCH_REPORTED;
	e.rank[1].status = EXITED(2);
	launch_ends_number(&e);
	UNIT_OK(e.rank[0].died == 0 && e.rank[1].died == 0 && e.deaths == 0,
	    "running and reported ranks are not numbered");
	launch_ends_free(&e);
}

/* Rank i reaped with status and death number died. */
static void
set(struct launch_ends *e, int i, int status, int died)
{
	e->rank[i].state = LAUNCH_REAPED;
	e->rank[i].status = status;
	e->rank[i].died = died;
}

static void
test_first_failure(void)
{
	struct launch_ends e;

	table(&e);
	UNIT_OK(launch_ends_first_failure(&e, 0) == -1,
	    "none ended: none named");
	set(&e, 0, EXITED(0), 1);
	set(&e, 1, EXITED(3), 4);
	set(&e, 2, KILLED(SIGABRT), 3);
	UNIT_OK(launch_ends_first_failure(&e, 0) == 2 &&
	    launch_ends_first_failure(&e, 1) == -1,
	    "the failure that died first, "
	    "not the lowest rank nor one that succeeded before it");
	e.rank[3].died = 2;		/* died, not yet reaped */
	e.rank[3].status = EXITED(1);
	UNIT_OK(launch_ends_first_failure(&e, 0) == 2, "a rank not reaped "
	    "waits, whatever its number");
	e.rank[2].state = LAUNCH_REPORTED;
	UNIT_OK(launch_ends_first_failure(&e, 0) == 1, "a reported rank is "
	    "passed over");
	launch_ends_free(&e);

	/* Rank 1 killed: rank 0 left because of it, and ended first. */
	table(&e);
	set(&e, 0, EXITED(1), 1);
	set(&e, 1, KILLED(SIGKILL), 2);
	set(&e, 2, KILLED(SIGTERM), 3);
	set(&e, 3, KILLED(SIGPIPE), 4);
	UNIT_OK(launch_ends_first_failure(&e, 0) == 0 &&
	    launch_ends_first_failure(&e, 1) == 1, "of those killed from "
	    "outside, the first");
	launch_ends_free(&e);
}

/* An identity past its buffer is refused by prog_join, not by exiting
 * (lib/prog's join.c, beside the launcher's other prog code). */
static void
test_job_identity(void)
{
	struct prog_job job;
	struct cli_group g;
	char big[1100], err[256];

	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cli_group_defaults(&g);
	g.rank = 2;
	prog_job_init(&job, "collx-test");
	prog_job_add(&job, "--mode", "%s", "tp");
	prog_job_add(&job, "--big", "%s", big);
	prog_job_add(&job, "--after", "%d", 1);
	UNIT_OK(strcmp(job.text, "collx-test --mode=tp") == 0,
	    "an identity keeps what fitted before the overflow");
	UNIT_OK(prog_join(NULL, &g, &job, err, sizeof err) == CLI_EXIT_RUNTIME &&
	    strcmp(err, "rank 2: job identity too long at --big") == 0,
	    "prog_join refuses it, naming the first option that did not fit");
	cli_group_free(&g);
}

int
main(int argc, char **argv)
{
	(void)argc;
	cli_init(argv[0]);
	if (mkdtemp(tmpdir) == NULL)
		return 1;
	test_hosts();
	test_hosts_local();
	test_place_ranks();
	test_quoting();
	test_job_local();
	test_job_remote();
	test_export();
	test_exec_why();
	test_spawn_local();
	test_spawn_remote();
	test_spawn_fails();
	test_linetag();
	test_statuses();
	test_died();
	test_number();
	test_first_failure();
	test_job_identity();
	UNIT_OK(made_ok,
	    "every wait status used is the exit or signal asked for");
	if (unit_rmdir(tmpdir) < 0)
		return 1;
	return unit_done();
}
