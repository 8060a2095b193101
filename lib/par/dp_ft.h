/* dp_ft: what collx-dp's --ft (dp_ft.c) and a mesh's (pipe_dp_ft.c) share. */
#ifndef COLLX_DP_FT_H
#define COLLX_DP_FT_H

#include <stddef.h>

#include "comm/comm.h"

/* Whether sub, the survivors of old, may go on: more than half of old's
 * ranks, or half with old's first. */
int dp_ft_majority(struct comm *old, struct comm *sub);
/* Whether world rank w is in c. */
int dp_ft_member(struct comm *c, int w);
/* The world ranks that are in a and not in b, as "2" or "2, 3" into buf:
 * those that left (a the group before) or joined (b before). */
void dp_ft_departed(struct comm *a, struct comm *b, char *buf, size_t len);

#endif
