/* test_restart: collx-run's restarts and binding as the library gives
 * them: which checkpoint PROGRAM writes, whether the job wrote it, the
 * words that resume from it, which failures are worth a restart, and the
 * cores read from a topology laid out here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cpus.h"
#include "par/ckpt.h"
#include "launch/launch.h"
#include "tensor/tensor.h"
#include "unit.h"

static char tmpdir[] = "/tmp/test_restart.XXXXXX";

/* argv joined by blanks. */
static const char *
joined(char **argv)
{
	static char buf[1024];
	size_t off = 0;

	buf[0] = '\0';
	for (int k = 0; argv[k] && off < sizeof buf; k++)
		off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s",
		    k ? " " : "", argv[k]);
	return buf;
}

static void
resume_case(char **prog, int n, const char *wdir, const char *arg,
    const char *path, const char *want)
{
	struct launch_job j = { .n = n, .prog = prog, .wdir = wdir };
	struct launch_resume r;
	char **argv;

	launch_resume_init(&r, &j);
	if (arg == NULL) {
		UNIT_OK(r.arg == NULL && r.path == NULL &&
		    !launch_resume_written(&r), "no --checkpoint, no checkpoint");
		return;
	}
	UNIT_OK(r.arg && strcmp(r.arg, arg) == 0, arg);
	UNIT_OK(r.path && strcmp(r.path, path) == 0, path);
	argv = launch_resume_argv(prog, &r);
	UNIT_OK(strcmp(joined(argv), want) == 0, want);
	if (strcmp(joined(argv), want) != 0)
		fprintf(stderr, "# got: %s\n", joined(argv));
	launch_words_free(argv);
	launch_resume_free(&r);
}

static void
test_resume_argv(void)
{
	char *plain[] = { "collx-dp", "-m", "m.st", "--checkpoint", "ck.st",
	    "--checkpoint-every", "5", "--steps", "9", NULL };
	char *eq[] = { "env", "A=1", "collx-pipe", "--resume=old.st",
	    "--checkpoint=c{rank}of{world}.st", "-q", NULL };
	char *mine[] = { "collx-tp", "--checkpoint", "/abs/ck", "--resume",
	    "old", "--resume-step", NULL };
	char *none[] = { "collx-dp", "--checkpoint-every", "5", "--resume",
	    "x", "--checkpoint", NULL };

	resume_case(plain, 2, NULL, "ck.st", "ck.st",
	    "collx-dp -m m.st --resume ck.st --checkpoint ck.st "
	    "--checkpoint-every 5 --steps 9");
	resume_case(eq, 4, "run", "c0of4.st", "run/c0of4.st",
	    "env A=1 collx-pipe --resume c0of4.st --checkpoint=c{rank}of{world}.st -q");
	resume_case(mine, 2, "run", "/abs/ck", "/abs/ck",
	    "collx-tp --resume /abs/ck --checkpoint /abs/ck --resume-step");
	/* --checkpoint with no value, --checkpoint-every alone: none */
	resume_case(none, 2, NULL, NULL, NULL, NULL);
}

static void
test_resume_written(void)
{
	char path[256], tmp[300];
	char *prog[] = { "p", "--checkpoint", path, NULL };
	struct launch_job j = { .n = 1, .prog = prog };
	struct launch_resume r;
	FILE *f;

	snprintf(path, sizeof path, "%s/ck", tmpdir);
	snprintf(tmp, sizeof tmp, "%s/ck.tmp", tmpdir);
	launch_resume_init(&r, &j);
	UNIT_OK(!r.existed && !launch_resume_written(&r),
	    "no file yet: nothing to resume from");
	f = fopen(path, "w");
	fputs("one", f);
	fclose(f);
	UNIT_OK(launch_resume_written(&r), "a file written since the start");
	launch_resume_free(&r);

	/* a file there before the job is another run's */
	launch_resume_init(&r, &j);
	UNIT_OK(r.existed && !launch_resume_written(&r),
	    "a file older than the job is not resumed from");
	f = fopen(tmp, "w");	/* replaced atomically, as checkpoints are */
	fputs("two", f);
	fclose(f);
	UNIT_OK(rename(tmp, path) == 0 && launch_resume_written(&r),
	    "the same file replaced by the job is");
	launch_resume_free(&r);
	unlink(path);
}

/* The step of a checkpoint, read from its header alone. */
static void
test_step_read(void)
{
	struct tensor_set s = { 0 }, m;
	struct tensor t;
	int64_t shape[1] = { 1000 };
	char path[256], err[256];
	long step = -1;
	FILE *f;

	snprintf(path, sizeof path, "%s/ck.safetensors", tmpdir);
	UNIT_OK(tensor_init(&t, DT_F32, 1, shape, err, sizeof err) == 0 &&
	    tensor_set_add(&s, "w", &t, err, sizeof err) == 0 &&
	    tensor_set_meta_put(&s, "collx.arch", "mlp", err, sizeof err) == 0 &&
	    ckpt_meta_put_step(&s, 1234, err, sizeof err) == 0 &&
	    tensor_save(path, &s, err, sizeof err) == 0, "a checkpoint written");
	UNIT_OK(ckpt_step_read(path, &step, err, sizeof err) == 0 &&
	    step == 1234, "its step read back");
	UNIT_OK(tensor_meta_load(path, &m, err, sizeof err) == 0 &&
	    m.count == 0 && m.nmeta == 2 &&
	    strcmp(tensor_set_meta(&m, "collx.arch"), "mlp") == 0,
	    "the header's metadata alone");
	UNIT_OK(ckpt_meta_take_step(&m, &step, err, sizeof err) == 0 &&
	    step == 1234 && m.nmeta == 1 && tensor_set_meta(&m, "collx.arch"),
	    "the step taken out, the model's metadata left");
	tensor_set_free(&m);
	UNIT_OK(ckpt_meta_take_step(&m, &step, err, sizeof err) < 0 &&
	    strstr(err, "not a collx checkpoint"), "no step: not a checkpoint");
	/* a header cut short: refused, naming the file */
	UNIT_OK(truncate(path, 20) == 0 &&
	    ckpt_step_read(path, &step, err, sizeof err) < 0 &&
	    strstr(err, path) && strstr(err, "runs past the end"), err);
	f = fopen(path, "w");
	fclose(f);
	UNIT_OK(tensor_meta_load(path, &m, err, sizeof err) < 0 &&
	    strstr(err, "truncated"), "an empty file");
	unlink(path);
	tensor_set_free(&s);
}

static void
test_restartable(void)
{
	UNIT_OK(launch_restartable(SIGKILL) && launch_restartable(SIGSEGV),
	    "a rank killed is restarted");
	UNIT_OK(launch_restartable(1 << 8) && launch_restartable(255 << 8),
	    "a runtime failure (1) and a lost ssh (255) are restarted");
	UNIT_OK(!launch_restartable(0) && !launch_restartable(2 << 8) &&
	    !launch_restartable(3 << 8) && !launch_restartable(4 << 8) &&
	    !launch_restartable(126 << 8) && !launch_restartable(127 << 8),
	    "success, usage, bad input, a check, 126 and 127 are not");
}

/* The hosts that answer: the remote shell's stand-in fails for "down",
 * never answers for "slow" (killed at the timeout), runs the command for
 * "up"; localhost is this machine, never asked. */
static void
test_probe(void)
{
	char *ssh[] = { "sh", "-c", "case $0 in down) exit 255;; slow) sleep 30;;"
	    " esac; exec \"$@\"", NULL };
	struct launch_job j = { .ssh = ssh };
	char err[256];
	int up[4] = { -1, -1, -1, -1 }, rc;
	double t;

	UNIT_OK(launch_hosts_add_list(&j.hosts, "up,down,slow,localhost", err,
	    sizeof err) == 0 && j.hosts.n == 4 && j.hosts.local[3] &&
	    !j.hosts.local[0], "four hosts, the last this machine");
	t = cli_now();
	rc = launch_hosts_probe(&j, 1.0, up, err, sizeof err);
	t = cli_now() - t;
	UNIT_OK(rc == 0 && up[0] == 1 && up[1] == 0 && up[2] == 0 && up[3] == 1,
	    "up answers, down fails, slow is late, localhost is here");
	UNIT_OK(t >= 1.0 && t < 3.0, "the late one given up at the timeout");
	launch_hosts_keep(&j.hosts, up);
	UNIT_OK(j.hosts.n == 2 && strcmp(j.hosts.names[0], "up") == 0 &&
	    strcmp(j.hosts.names[1], "localhost") == 0 && !j.hosts.local[0] &&
	    j.hosts.local[1] && j.hosts.slots[1] == 1,
	    "the hosts that answer kept, in order, with their marks");
	launch_hosts_free(&j.hosts);
}

/* cpuN/topology under dir with package and core id (core < 0: no
 * files). */
static void
topology(const char *dir, int cpu, int pkg, int core)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof p, "%s/cpu%d", dir, cpu);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/cpu%d/topology", dir, cpu);
	mkdir(p, 0700);
	if (core < 0)
		return;
	snprintf(p, sizeof p, "%s/cpu%d/topology/core_id", dir, cpu);
	f = fopen(p, "w");
	fprintf(f, "%d\n", core);
	fclose(f);
	snprintf(p, sizeof p, "%s/cpu%d/topology/physical_package_id", dir, cpu);
	f = fopen(p, "w");
	fprintf(f, "%d\n", pkg);
	fclose(f);
}

/* The first m CPUs this process may run on, in cpu[]: how many there are
 * (at most m). */
/*
 * The topology of CPUs 0 .. n-1 (CPU k of package pkg[k], core core[k];
 * core < 0: no topology files) grouped: 1 when it gives want_n cores,
 * CPU k in core want[k] with the others of that core and no more.
 */
static int
cores_read_as(int n, const int *pkg, const int *core, int want_n,
    const int *want)
{
	struct cli_cores c;
	char dir[300];
	cpu_set_t cpus;
	int k, bad;

	snprintf(dir, sizeof dir, "%s/sys%d.%d.%d", tmpdir, n, core[0],
	    core[n - 1]);
	mkdir(dir, 0700);
	CPU_ZERO(&cpus);
	for (k = 0; k < n; k++) {
		topology(dir, k, pkg[k], core[k]);
		CPU_SET(k, &cpus);
	}
	cli_cores_group(&c, &cpus, dir);
	bad = c.n != want_n;
	for (k = 0; k < n && !bad; k++) {
		int same = 0;
		for (int i = 0; i < n; i++)
			same += want[i] == want[k];
		bad = !CPU_ISSET(k, &c.core[want[k]]) ||
		    CPU_COUNT(&c.core[want[k]]) != same;
	}
	cli_cores_free(&c);
	unit_rmdir(dir);
	return !bad;
}

static void
test_cores(void)
{
	int zero[] = { 0, 0, 0 }, pair[] = { 0, 1, 2 }, none[] = { -1, -1, -1 };
	int one[] = { 0, 0, 0 }, each[] = { 0, 1, 2 }, split[] = { 0, 1, 0 };
	struct cli_cores c;
	char err[256];
	cpu_set_t mine;

	UNIT_OK(cores_read_as(2, zero, zero, 1, one),
	    "two hardware threads of one core are one core");
	UNIT_OK(cores_read_as(2, pair, zero, 2, each),
	    "core 0 of two packages is two cores");
	UNIT_OK(cores_read_as(2, zero, pair, 2, each),
	    "two core ids are two cores");
	UNIT_OK(cores_read_as(2, zero, none, 2, each),
	    "without topology every CPU is a core of its own");
	UNIT_OK(cores_read_as(3, zero, split, 2, split),
	    "threads of a core apart in the numbering are one core");
	UNIT_OK(sched_getaffinity(0, sizeof mine, &mine) == 0 &&
	    cli_cores_read(&c, "/nonexistent", err, sizeof err) == 0 &&
	    c.n == CPU_COUNT(&mine) && CPU_COUNT(&c.core[c.n - 1]) == 1,
	    "this process's CPUs, each a core of its own without topology");
	cli_cores_free(&c);
}

int
main(int argc, char **argv)
{
	(void)argc;
	cli_init(argv[0]);
	if (mkdtemp(tmpdir) == NULL)
		return 1;
	test_resume_argv();
	test_resume_written();
	test_restartable();
	test_step_read();
	test_probe();
	test_cores();
	if (unit_rmdir(tmpdir) < 0)
		return 1;
	return unit_done();
}
