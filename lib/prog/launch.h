/* launch: what a launcher (collx-run) needs that is worth testing alone —
 * host lists and hostfiles, rank placement, shell quoting for ssh. */
#ifndef COLLX_LAUNCH_H
#define COLLX_LAUNCH_H

#include <stddef.h>

struct launch_hosts {
	int n;
	char **names;		/* as given: "node1", "user@node1", "10.0.0.2" */
	int *slots;		/* ranks per visit of the host; 1 unless slots=K */
};

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

/*
 * Rank placement: the hosts are visited in order, host h taking the next
 * slots[h] ranks (or per_host when > 0), wrapping round until all n are
 * placed; with one slot each that is rank i on host i mod H. local_rank[i]
 * counts the earlier ranks on the same host name.
 */
void launch_place(const struct launch_hosts *h, int n, int per_host,
    int *host_of, int *local_rank);

/* local_world[i]: how many of the n ranks launch_place put on rank i's
 * host name (torchrun's LOCAL_WORLD_SIZE). */
void launch_local_worlds(const struct launch_hosts *h, int n,
    const int *host_of, const int *local_rank, int *local_world);

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

/* A TCP port on host (a numeric address) that is free now and outside the
 * kernel's ephemeral range. 0 or -1 with the reason in err. */
int launch_free_port(const char *host, int *port, char *err, size_t errlen);

#endif
