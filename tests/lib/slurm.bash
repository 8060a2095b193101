# A private single-host Slurm, as tests/slurm.bats and
# examples/bench-launch.sh start one: munged, slurmctld and slurmd (as
# root) from a slurm.conf of its own, every file in one directory.
# slurm_private_start DIR PORT_CTLD PORT_D: exports SLURM_CONF; 0 once this
# host's node is idle, else 1 with the daemons' logs on stderr. The caller
# stops the daemons (their pid files are in DIR) and removes DIR.
slurm_private_start() {
	local d=$1 port_ctld=$2 port_d=$3 node
	node=$(hostname)
	export SLURM_CONF=$d/slurm.conf
	mkdir -p "$d/state" "$d/spool"
	cat >"$SLURM_CONF" <<EOF
ClusterName=collx
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port_ctld
SlurmdPort=$port_d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge.socket
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillOnBadExit=1
SlurmdParameters=config_overrides
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=collx Nodes=ALL Default=YES MaxTime=60 State=UP
EOF
	mungekey --create --keyfile="$d/munge.key" >/dev/null 2>&1 ||
	    { echo "mungekey failed" >&2; return 1; }
	munged --force --socket="$d/munge.socket" --key-file="$d/munge.key" \
	    --pid-file="$d/munged.pid" --log-file="$d/munged.log" \
	    --seed-file="$d/munged.seed" 3>&- ||
	    { cat "$d/munged.log" >&2; return 1; }
	slurmctld -f "$SLURM_CONF" -i 3>&- ||
	    { cat "$d/slurmctld.log" >&2; return 1; }
	slurmd -f "$SLURM_CONF" -N "$node" 3>&- ||
	    { cat "$d/slurmd.log" >&2; return 1; }
	for _ in $(seq 150); do
		[ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ] && return 0
		sleep 0.2
	done
	echo "the node never became idle: $(sinfo -h -o '%n %t' 2>&1)" >&2
	tail -n 20 "$d/slurmctld.log" "$d/slurmd.log" >&2
	return 1
}
