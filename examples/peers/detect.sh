# Which peers this machine has, for the scripts that measure collx beside
# them. peers_detect NAME WORK sets have_mpi (Open MPI's allreduce and
# ping-pong built as WORK/mpi and WORK/mpi_pingpong from mpi_allreduce.c
# and mpi_pingpong.c) and have_gloo (PyTorch's Gloo through
# /usr/bin/python3), saying on stderr, as NAME, why a peer is skipped;
# peers_detect_mpi NAME WORK and peers_detect_gloo NAME each one of them.
peers_detect() {
	peers_detect_mpi "$@"
	peers_detect_gloo "$1"
}

peers_detect_mpi() {
	local name=$1 work=$2 dir
	dir=$(dirname "${BASH_SOURCE[0]}")
	have_mpi=0
	if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
		echo "$name: Open MPI skipped: mpicc or mpirun not found" \
		    "(apt-get install openmpi-bin libopenmpi-dev)" >&2
	elif mpicc -O2 -o "$work/mpi" "$dir/mpi_allreduce.c" &&
	    mpicc -O2 -o "$work/mpi_pingpong" "$dir/mpi_pingpong.c"; then
		have_mpi=1
	else
		echo "$name: Open MPI skipped: mpicc failed" >&2
	fi
}

peers_detect_gloo() {
	have_gloo=0
	if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
		have_gloo=1
	else
		echo "$1: Gloo skipped: /usr/bin/python3 has no torch" \
		    "(apt-get install python3-torch)" >&2
	fi
}
