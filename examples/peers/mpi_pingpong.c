/*
 * Peer benchmark: an OSU-style ping-pong (osu_latency) between ranks 0
 * and 1, timed as collx-bench p2p --test latency times it: rank 0 sends
 * BYTES, rank 1 sends them back, an iteration's time is half the round
 * trip, and rank 0 prints the median of ITERS after WARMUP untimed ones
 * (of an even count, the mean of the middle two, as collx-bench takes it).
 * usage: mpirun -n 2 mpi_pingpong BYTES ITERS WARMUP
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	int rank, world, iters, warmup, peer;
	size_t bytes;
	double *ts = NULL, t, med;
	char *buf = NULL;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	if (argc != 4 || world < 2) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -n 2 mpi_pingpong "
			    "BYTES ITERS WARMUP\n");
		MPI_Finalize();
		return 2;
	}
	bytes = strtoull(argv[1], NULL, 10);
	iters = atoi(argv[2]);
	warmup = atoi(argv[3]);
	if (iters < 1 || warmup < 0 || (buf = calloc(bytes + 1, 1)) == NULL ||
	    (ts = calloc((size_t)iters, sizeof *ts)) == NULL) {
		fprintf(stderr, "mpi_pingpong: bad arguments or out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	peer = rank == 0 ? 1 : 0;
	MPI_Barrier(MPI_COMM_WORLD);
	/* Ranks past 1 only wait at the barriers, as under collx-bench. */
	for (int i = 0; rank < 2 && i < warmup + iters; i++) {
		t = MPI_Wtime();
		if (rank == 0) {
			MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
			    MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
			    MPI_STATUS_IGNORE);
			MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
		}
		if (i >= warmup)
			ts[i - warmup] = (MPI_Wtime() - t) / 2;
	}
	if (rank == 0) {
		qsort(ts, (size_t)iters, sizeof *ts, cmp);
		med = iters % 2 ? ts[iters / 2] :
		    (ts[iters / 2 - 1] + ts[iters / 2]) / 2;
		printf("mpi_pingpong world=%d bytes=%zu median_s=%.9g\n", world,
		    bytes, med);
	}
	free(ts);
	free(buf);
	MPI_Finalize();
	return 0;
}
