/* test_trainer: the trainer shell's cadence and output shapes: when a
 * checkpoint is due, the --timing rows (the standard columns, then the
 * program's; bandwidth: 24 B in 0.5 s is 4.8e-08 GB/s), the loss CSV
 * with and without bytes_sent, {world} in an output's path. Expected
 * files written out by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "prog/trainer.h"
#include "unit.h"

static char dir[] = "/tmp/test_trainer.XXXXXX";

/* 1 when the file at dir/name holds exactly want. */
static int
file_is(const char *name, const char *want)
{
	char path[256], buf[4096];
	size_t n;
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	if (strcmp(buf, want) != 0)
		printf("# %s:\n%s# want:\n%s", name, buf, want);
	return strcmp(buf, want) == 0;
}

static void
cadence(void)
{
	struct trainopt_ckpt none = { 0 }, last = { .path = "c" },
	    every = { .path = "c", .every = 3 };
	int got[10], ok = 1;

	/* every 3 of 10 steps: after steps 2, 5 and 8, and the last, 9 */
	for (int k = 0; k < 10; k++)
		got[k] = trainer_ckpt_due(&every, k, 10);
	for (int k = 0; k < 10; k++)
		ok &= got[k] == (k == 2 || k == 5 || k == 8 || k == 9);
	UNIT_OK(ok, "--checkpoint-every 3 of 10 steps: after 3, 6, 9 and 10");
	UNIT_OK(trainer_ckpt_due(&last, 9, 10) && !trainer_ckpt_due(&last, 8,
	    10), "--checkpoint alone: after the last step only");
	UNIT_OK(!trainer_ckpt_due(&none, 9, 10), "no --checkpoint: never");
}

static void
timing(void)
{
	struct trainer t;
	char path[256];

	snprintf(path, sizeof path, "%s/t-{rank}.csv", dir);
	trainer_open(&t, path, "stage,phase", 1, 4);
	trainer_begin(&t, "samples", 0, 2);
	trainer_row(&t, "send", "1f1b", "f32", 6, 24, 0, 0.5, "1,fwd");
	trainer_row(&t, "step", "-", "bf16", 3, 6, 1, 0.25, "1,all");
	trainer_end(&t);
	trainer_close(&t);
	UNIT_OK(file_is("t-1.csv",
	    "program,op,algo,rank,world_size,dtype,count,bytes,iter,seconds,"
	    "algbw_gbps,busbw_gbps,stage,phase\n"
	    "test_trainer,send,1f1b,1,4,f32,6,24,0,0.5,4.8e-08,4.8e-08,1,fwd\n"
	    "test_trainer,step,-,1,4,bf16,3,6,1,0.25,2.4e-08,2.4e-08,1,all\n"),
	    "timing rows: rank 1's file, standard columns, then the program's");
}

static void
loss_csv(void)
{
	struct train_step s[2] = {
		{ .step = 4, .epoch = 1, .loss = 0.5, .tokens = 8,
		  .seconds = 0.5, .bytes_sent = 123 },
		{ .step = 5, .epoch = 2, .loss = 0.25, .tokens = 8,
		  .seconds = 0.25, .bytes_sent = 7 }
	};
	char path[256];

	snprintf(path, sizeof path, "%s/l-{world}.csv", dir);
	trainer_save_loss(path, 2, s, 2, 1);
	UNIT_OK(file_is("l-2.csv",
	    "step,epoch,loss,tokens,seconds,tokens_per_s,bytes_sent\n"
	    "4,1,0.5,8,0.500000,16.0,123\n"
	    "5,2,0.25,8,0.250000,32.0,7\n"),
	    "loss CSV with bytes_sent, at {world} 2");
	snprintf(path, sizeof path, "%s/m.csv", dir);
	trainer_save_loss(path, 2, s + 1, 1, 0);
	UNIT_OK(file_is("m.csv", "step,epoch,loss,tokens,seconds,tokens_per_s\n"
	    "5,2,0.25,8,0.250000,32.0\n"), "loss CSV without bytes_sent");
}

int
main(void)
{
	cli_init("test_trainer");
	cli_quiet = 1;
	if (mkdtemp(dir) == NULL)
		return 1;
	cadence();
	timing();
	loss_csv();
	unit_rmdir(dir);
	return unit_done();
}
