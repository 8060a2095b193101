/* launch: what a launcher (collx-run) needs that is worth testing alone —
 * host lists and hostfiles, rank placement, shell quoting for ssh
 * (launch.c), what each rank is started with (launch_rank.c), starting its
 * process (launch_spawn.c), and how the ranks ended: the order of their
 * deaths and which failure to name (launch_end.c); the cores ranks are
 * bound to (launch_bind.c); restarting a job from its newest checkpoint
 * (launch_restart.c); the launcher's own signals and limits
 * (launch_sig.c); and the job kept together, from its ranks' start to
 * their end, restarts included (launch_super.c). */
#ifndef COLLX_LAUNCH_H
#define COLLX_LAUNCH_H

#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "cli/cpus.h"

struct launch_hosts {
	int n;
	char **names;		/* as given: "node1", "user@node1", "10.0.0.2" */
	int *slots;		/* ranks per visit of the host; 1 unless slots=K */
	int *local;		/* 1: this machine, marked as hosts are added */
};

/*
 * Adding hosts marks those that name this machine, whose ranks start
 * without the remote shell (as mpirun's do): a loopback name or address
 * (localhost, 127.0.0.1, ::1), an address of one of its interfaces, or its
 * host name (or that name's first label). A "user@host" stays remote: it
 * asks for that user.
 */

/* Append the hosts of "a,b:4,c"; "host:K" gives host K slots (as mpirun's
 * -H). 0 or -1 with the reason in err. */
int launch_hosts_add_list(struct launch_hosts *h, const char *list,
    char *err, size_t errlen);
/* A hostfile's text: one host per line, optional "slots=K" (or "host:K"), '#' comments,
 * blank lines ignored. name labels errors ("hosts:3: ..."). */
int launch_hostfile_parse(struct launch_hosts *h, const char *text,
    const char *name, char *err, size_t errlen);
int launch_hostfile_read(struct launch_hosts *h, const char *path,
    char *err, size_t errlen);
void launch_hosts_free(struct launch_hosts *h);
/* Ranks the hosts hold in one pass over the list (per_host > 0 overrides
 * every host's slots). */
int launch_hosts_slots(const struct launch_hosts *h, int per_host);

/* Whether host is a loopback name (localhost) or address (127.0.0.0/8,
 * ::1). */
int launch_host_loopback(const char *host);
/* Whether every host was marked local (so none is remote); 1 without hosts. */
int launch_hosts_all_local(const struct launch_hosts *h);

/*
 * Rank placement: the hosts are visited in order, host h taking the next
 * slots[h] ranks (or per_host when > 0), wrapping round until all n are
 * placed; with one slot each that is rank i on host i mod H. local_rank[i]
 * counts the earlier ranks on the same host name, or on this machine under
 * any of the names marked local.
 */
void launch_place(const struct launch_hosts *h, int n, int per_host,
    int *host_of, int *local_rank);

/* local_world[i]: how many of the n ranks launch_place put on rank i's
 * host (torchrun's LOCAL_WORLD_SIZE), named as launch_place counts. */
void launch_local_worlds(const struct launch_hosts *h, int n,
    const int *host_of, const int *local_rank, int *local_world);

/* Where one rank runs: an index into the hosts (-1: this machine, without
 * the remote shell), and its place among the ranks on that host. */
struct launch_rank {
	int host;
	int local_rank, local_world;
};

/* Where each of the n ranks runs, in r[0..n-1]: launch_place's host and
 * local rank, and launch_local_worlds' world, with -1 for a host marked
 * local; without hosts, every rank on this machine (rank i of n). */
void launch_place_ranks(const struct launch_hosts *h, int n, int per_host,
    struct launch_rank *r);

/* The host part of "user@host" (for addresses). */
const char *launch_host_addr(const char *host);

/* s quoted for a POSIX shell (as ssh's remote shell reads its command
 * line); malloc'd, never NULL (dies on ENOMEM). Safe words stay bare. */
char *launch_shquote(const char *s);
/* Split a command into words as a shell would, without expansions:
 * blanks separate, '...' and "..." quote, backslash escapes. Returns a
 * NULL-terminated malloc'd vector (free with launch_words_free) and its
 * count in *argc; -1 on unbalanced quotes or an empty command. */
int launch_split_words(const char *s, char ***argv, int *argc,
    char *err, size_t errlen);
void launch_words_free(char **argv);
/* Append w (owned from now on) to the NULL-terminated vector *v of *n words. */
void launch_words_push(char ***v, int *n, char *w);

/*
 * Why PROGRAM could not be executed (errnum from execvp), as the one line
 * a launcher prints: "cannot execute PROG: REASON". A name without a slash
 * that no directory on PATH holds is said to be looked up there, and
 * ./PROG suggested when dir (where the rank starts) has a file of that
 * name. PATH is env's (NAME=VALUE words, NULL-terminated; may be NULL),
 * else the environment's.
 */
void launch_exec_why(const char *prog, int errnum, char *const *env,
    const char *dir, char *buf, size_t len);

/* The rendezvous port on the first host when ranks run on hosts. */
#define LAUNCH_DEFAULT_PORT 29500

/* A job: what every rank's environment and command line are made from.
 * The launcher fills the options; launch_job_prepare the rest. */
struct launch_job {
	int n;			/* ranks */
	struct launch_hosts hosts;
	char **ssh;		/* remote shell command, as words */
	char **prog;		/* PROGRAM ARG..., NULL-terminated */
	char *master;		/* COLLX_MASTER: --master, or chosen */
	char *timeout;		/* COLLX_TIMEOUT, as given */
	const char *port_range;	/* COLLX_PORT_RANGE */
	const char *wdir;	/* remote (and local) working directory */
	char **exports;		/* NAME=VALUE for every rank (-x) */
	int nexports;
	/* set by launch_job_prepare */
	char *torch_addr;	/* MASTER_ADDR and MASTER_PORT, for PyTorch */
	int torch_port;
	char *cwd;		/* where remote ranks start without wdir */
	char job_id[33];	/* COLLX_JOB_ID: drawn at random, or the caller's */
};

/*
 * The rest of a job once its options are known: the rendezvous address
 * (without --master: a random free port on 127.0.0.1 outside the kernel's
 * ephemeral range, which no rank's listener or outgoing connection can
 * take first, when no host is remote; else the first host on
 * LAUNCH_DEFAULT_PORT, by this machine's host name when the first is a
 * loopback name the remote hosts cannot reach), a port for a PyTorch store
 * beside it, the job's identity (COLLX_JOB_ID from the environment, else
 * random) and, with hosts and no wdir, the directory remote ranks start
 * in. 0 or -1 with the reason in err.
 */
int launch_job_prepare(struct launch_job *j, char *err, size_t errlen);
void launch_job_free(struct launch_job *j);

/*
 * Pass -x's NAME[=VALUE] to every rank of j: NAME alone with its value
 * here. 0, or -1 with the reason in err: NAME is not a variable's name,
 * is one the launcher sets for each rank itself, or alone and unset.
 */
int launch_job_export(struct launch_job *j, const char *arg, char *err,
    size_t errlen);
/* COLLX_TOKEN from the environment, or NULL when unset or empty. */
const char *launch_token(void);

/* NAME=VALUE for every variable rank i of j gets, NULL-terminated (free
 * with launch_words_free). A remote rank's token is left out: it goes
 * through standard input, since command lines are visible in ps. */
char **launch_rank_env(const struct launch_job *j, int i,
    const struct launch_rank *r);
/* Rank i's command line: locally PROGRAM ARG...; on a host SSH... HOST
 * [cd DIR &&] env NAME=VALUE... PROGRAM ARG..., all after HOST quoted for
 * the remote shell; with a token, a shell that reads it from its first
 * line of input takes env's place. {rank} and {world} substituted. */
char **launch_rank_argv(const struct launch_job *j, int i,
    const struct launch_rank *r, char *const *env);

/* What a rank's process gets from its launcher beside its command. */
struct launch_child {
	int no_input;		/* read end of an empty pipe: standard
				 * input of every rank but 0 */
	int out, err;		/* its standard output and error, or -1:
				 * the launcher's; the caller closes them */
	void (*setup)(void);	/* or NULL: first in the child, every
				 * signal blocked, to give back what the
				 * launcher changed for itself (signal
				 * actions, limits) */
	const cpu_set_t *cpus;	/* or NULL: the CPUs a local rank is
				 * bound to before PROGRAM starts */
};

/*
 * Start rank i of j, placed at r, with env and argv (launch_rank_env's and
 * launch_rank_argv's): a child in a process group of its own, with the
 * caller's signal mask, that SIGTERM ends should the launcher die.
 * Standard input: the launcher's for rank 0 (unless a terminal), else
 * c->no_input, a remote rank's after the token's line. A local rank gets
 * env in its environment and starts in j->wdir. *pid is set while every
 * signal is blocked, so a SIGCHLD handler finds it. Returns 0 when PROGRAM
 * runs (or the child ended before trying, as without --wdir's directory);
 * 127 (not found) or 126 (not executable) with the reason in err, the
 * child gone; -1 with the reason in err when no child was started.
 */
int launch_spawn(const struct launch_job *j, int i, const struct launch_rank *r,
    char **env, char **argv, const struct launch_child *c, pid_t *pid,
    char *err, size_t errlen);

/* Where a rank's process is on its way out. */
enum launch_state {
	LAUNCH_RUNNING,			/* not reaped yet */
	LAUNCH_REAPED,			/* reaped, its end not yet reported */
	LAUNCH_REPORTED			/* its end reported by the launcher */
};

/* How one rank's process ends, as its launcher learns it. */
struct launch_end {
	pid_t pid;			/* also its process group; 0 before */
	enum launch_state state;
	int status;			/* its wait status, once reaped */
	volatile sig_atomic_t died;	/* its place in the order of deaths
					 * (1 first), 0 until numbered */
};

/* The ends of a job's ranks, and how many deaths are numbered so far. */
struct launch_ends {
	int n;
	struct launch_end *rank;
	volatile sig_atomic_t deaths;
};

void launch_ends_init(struct launch_ends *e, int n);
/* Every rank back to not started, for a job started again (with SIGCHLD
 * blocked: its handler numbers deaths). */
void launch_ends_reset(struct launch_ends *e);
void launch_ends_free(struct launch_ends *e);

/* Whether a wait status is a failure: a nonzero exit, or a signal. */
int launch_status_failed(int status);
/*
 * Whether a wait status is that of a rank killed from outside (by a user,
 * the OOM killer: KILL, TERM, INT, HUP, QUIT): it failed when the signal
 * came, before its exit, and a peer that leaves because of it can end
 * first, while the killed rank still waits for a core to finish dying on.
 */
int launch_killed_from_outside(int status);

/*
 * Number the death of the rank whose process is pid, unless it has a
 * number. Async-signal-safe, for the SIGCHLD handler (elsewhere call it
 * with SIGCHLD blocked): a pending SIGCHLD is never queued twice, so the
 * one that arrives names the first child to die since the last, and the
 * order of deaths holds when several are reaped at once.
 */
void launch_ends_died(struct launch_ends *e, pid_t pid);
/* The wait status of pid, reaped: recorded for its rank unless reaped
 * before. Returns the rank, or -1 when no rank still running is pid. */
int launch_ends_reaped(struct launch_ends *e, pid_t pid, int status);
/* Number the deaths of the ranks reaped that no SIGCHLD numbered (it was
 * pending behind another's): those killed from outside first, then the
 * rest, each in rank order. */
void launch_ends_number(struct launch_ends *e);
/* Of the ranks reaped and not yet reported, the one that failed first (of
 * those killed from outside when outside is set), or -1. */
int launch_ends_first_failure(const struct launch_ends *e, int outside);
/* Whether the local process pid is stopped (by SIGSTOP, SIGTSTP, or a
 * tracer): alive but never answering, what its peers time out on. */
int launch_pid_stopped(pid_t pid);

/*
 * A launcher's own process state. launch_sig_catch: INT, TERM and HUP
 * (unless ignored from the start, as for a background job of a script or
 * under nohup: those stay ignored) and CHLD caught, each a byte (the
 * signal's number) written to a pipe whose read end it returns (-1 with
 * the reason in err), CHLD numbering the deaths of e's ranks first
 * (launch_ends_died); SIGPIPE ignored; orphans of the ranks this
 * process's to reap (Linux), so none lingers as a zombie that looks
 * alive. launch_sig_raise_nofile: the descriptor limit raised as far as
 * allowed (tagged output holds two pipes a rank). launch_sig_give_back,
 * the setup of a rank's child (struct launch_child): the signal actions
 * and the limit as they were.
 */
int launch_sig_catch(struct launch_ends *e, char *err, size_t errlen);
void launch_sig_raise_nofile(void);
void launch_sig_give_back(void);

/* The cores collx-run binds to (cli/cpus.h): here, the n ranks placed at r
 * that run on this machine (host -1). */
int launch_cores_fit(struct cli_cores *c, const struct launch_rank *r,
    int n, int mode, char *why, size_t len);

/*
 * Restarting a job from its newest checkpoint: the file a training program
 * writes with --checkpoint F (or --checkpoint=F) among PROGRAM's words, as
 * rank 0 names it ({rank} 0, {world} the ranks) and found from here (under
 * wdir when relative). A file there when the job started is not this
 * job's: only one written since is resumed from.
 */
struct launch_resume {
	char *arg;		/* F as rank 0 gets it, or NULL: none */
	char *path;		/* F from here */
	int at;			/* index in PROGRAM's words of --checkpoint */
	int existed;		/* F's identity when the job started: */
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	off_t size;
	char **argv;		/* PROGRAM resuming from F, once made */
};

/* The checkpoint of PROGRAM as j starts it (r->arg NULL when it has
 * none), and its identity now. */
void launch_resume_init(struct launch_resume *r, const struct launch_job *j);
void launch_resume_free(struct launch_resume *r);
/* Whether the checkpoint was written since launch_resume_init. */
int launch_resume_written(const struct launch_resume *r);
/* PROGRAM's words to resume from the checkpoint: prog with any --resume
 * of its own left out and --resume F before --checkpoint, NULL-terminated
 * (free with launch_words_free). */
char **launch_resume_argv(char *const *prog, const struct launch_resume *r);
/*
 * The words *prog (the job's PROGRAM, as first started) restarts with:
 * those resuming from the checkpoint once this job has written one (then
 * kept in r), else *prog left as it is; from says which ("from step S of
 * F", "as first started (...)"). 0, or -1 with the reason in err when the
 * checkpoint cannot be read.
 */
int launch_resume_next(struct launch_resume *r, char ***prog, char *from,
    size_t len, char *err, size_t errlen);

/*
 * Which of j's hosts answer, in up[] (1 or 0, one per host): a host marked
 * local does; a remote one when its remote shell runs "true" there (SSH...
 * HOST true) and exits 0 within timeout seconds, every host tried at once.
 * 0, or -1 with the reason in err when a try could not be started.
 */
int launch_hosts_probe(const struct launch_job *j, double timeout, int *up,
    char *err, size_t errlen);
/* The hosts up[] marks kept, in their order; the others dropped. */
void launch_hosts_keep(struct launch_hosts *h, const int *up);

/* Whether a rank that ended with status is worth starting again: killed,
 * or failed at run time; not a usage error (2), bad input (3), a check
 * that found a difference (4), or a PROGRAM not executable (126) or not
 * found (127), which would fail again the same way. */
int launch_restartable(int status);

struct linetag;

/*
 * A job supervised (launch_super.c): every rank started, its output passed
 * on (tagged when tag is set), its end taken; the first rank to fail named
 * in one line and the others stopped (TERM, then KILL after a grace
 * period); INT, TERM and HUP forwarded to every rank (KILL when asked
 * twice); what the ranks leave behind stopped. With max_restarts, a job a
 * rank of which failed at run time is stopped and started again from its
 * newest checkpoint (launch_resume_next), one line saying so; with
 * min_hosts, on the hosts still answering (launch_hosts_probe) when at
 * least that many do. The caller fills the options, spec prepared
 * (launch_job_prepare); the rest is launch_super_run's.
 */
struct launch_super {
	struct launch_job spec;	/* what the ranks are started with */
	int per_host;		/* K consecutive ranks a host, or 0 */
	int tag;		/* rank i's lines as "[i] ..." */
	double time_limit;	/* seconds until every rank is stopped, exit
				 * 124; 0: none */
	int bind;		/* CLI_BIND_: how local ranks are placed */
	int max_restarts;	/* 0: none */
	int min_hosts;		/* with hosts: go on with those answering */
	int master_given;	/* spec.master the caller's: kept when hosts
				 * are lost */
	char **preflight;	/* or NULL: what each rank runs first, to
				 * test every pair (launch_preflight_rank);
				 * PROGRAM starts only when all succeed */
	int patient;		/* a failure stops no other rank */
	int ft;			/* PROGRAM runs with --ft: a rank killed
				 * leaves, the others go on; with restarts
				 * left it is started again alone, to
				 * rejoin them */
	int *rejoin;		/* per rank: 1 so started again, 2 ended
				 * out of the group; or NULL */
	double ft_end_at;	/* --ft: when ranks still running after one
				 * finished are stopped; 0 */
	int ft_died;		/* --ft: the ranks killed so far (rank_ended) */
	int *died_then;		/* per rank with rejoin: ft_died when it was
				 * last started again */
	/* launch_super_run's: */
	struct cli_cores cores;	/* with enough of them, or none */
	/* the restarts so far, whether this attempt's failure is to be
	 * restarted, what it was and when */
	int restarts, restart;
	char cause[800];
	double failed_at, ended_at;	/* and when its ranks had all ended */
	struct launch_resume resume;	/* the program's checkpoint */
	/* rank i: */
	struct launch_rank *place;	/* where it runs */
	struct launch_ends ends;	/* its process and how it ended */
	struct linetag *out, *err;	/* its output, when tagged */
	int running, stopping, exit_code, killed, draining, interrupted;
	double kill_at, drain_until, limit_at;
	int no_input;		/* read end of an empty pipe: stdin of ranks
				 * but 0 */
	int sig_fd;		/* read end of launch_sig_catch's pipe */
	/* The rank being started: held here so that a child whose exec
	 * fails leaves with them reachable, not lost. */
	char **env, **argv;
};

/*
 * Run j until the ranks of its last attempt have ended. Returns the job's
 * exit status: 0 when every rank succeeded, else the first failed rank's
 * (128+N for signal N), 124 at the time limit, 126 or 127 when PROGRAM
 * could not be executed; or -1 with the reason in err when the launcher
 * itself failed (a pipe, poll, a rank that could not be started, hosts
 * that could not be asked), its ranks left to die with it.
 */
int launch_super_run(struct launch_super *j, char *err, size_t errlen);

/*
 * collx-run --preflight's rank (launch_preflight.c), a program body: it
 * joins the group its environment names (within 4 s, or COLLX_TIMEOUT
 * when shorter), then every pair of ranks in turn trades PF_PINGS round
 * trips of 8 bytes and a 1 MiB transfer whose checksum the receiver
 * returns; rank 0 prints the latency and bandwidth matrices on standard
 * error and names each pair whose transfer arrived corrupted, or whose
 * bandwidth is below half the median of the pairs over its transport
 * (shared memory, TCP). Returns the exit status: 0, or 4 when a pair
 * failed or a rank could not be reached (each rank's line says which).
 */
int launch_preflight_rank(void);
void launch_super_free(struct launch_super *j);

#endif
