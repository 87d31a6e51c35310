#!/usr/bin/env bash
# A single-node SLURM cluster on this machine (controller and compute node on localhost), for
# trying `python -m bench run --executor slurm` and for tests/test_executor_slurm.py.
#
#   sudo apt-get install -y slurm-wlm munge      # Debian / Ubuntu
#   sudo bash scripts/slurm_localhost.sh start   # writes /etc/slurm/slurm.conf, starts munged, slurmctld, slurmd
#   sinfo; srun hostname                         # check
#   sudo bash scripts/slurm_localhost.sh stop
#
# The node offers every core of the affinity mask and 80 % of the memory; one partition, `debug`.
# Nothing listens beyond what SLURM needs (slurmctld 6817, slurmd 6818 on this host); the Dask
# scheduler of `--executor slurm` is told to listen on 127.0.0.1 (--slurm-scheduler-host).
set -euo pipefail
action=${1:-start}
node=$(hostname -s)
conf=/etc/slurm/slurm.conf

# The daemons this script started, by the PID files they write (never by name: another user's
# munged or slurmd on a shared machine is not ours to stop).
run=${SLURM_LOCALHOST_RUN_DIR:-/run}  # where the PID files live (a test points it elsewhere)
pidfiles="$run/slurmd.pid:slurmd $run/slurmctld.pid:slurmctld $run/munge/munged.pid:munged"

stop() {
  local entry file name pid
  for entry in $pidfiles; do
    file=${entry%%:*}; name=${entry##*:}
    [ -s "$file" ] || continue
    pid=$(tr -dc 0-9 < "$file")
    # only the process the PID file names, and only while it is still that daemon
    if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$name" ]; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 20); do [ -d /proc/"$pid" ] || break; sleep 0.25; done
    fi
    rm -f "$file"
  done
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "slurm_localhost.sh: run as root (it writes $conf and starts daemons)" >&2; exit 2; }
command -v slurmctld >/dev/null && command -v munged >/dev/null || {
  echo "slurm_localhost.sh: install the Debian packages first: apt-get install -y slurm-wlm munge" >&2; exit 2; }

cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) * 8 / 10 / 1024 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge "$run/munge" /var/lib/munge /var/log/munge
chown slurm:slurm /var/spool/slurmctld /var/log/slurm
chown munge:munge /run/munge "$run/munge" /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; }
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key

cat > "$conf" <<CONF
# written by scripts/slurm_localhost.sh: one node, this host
ClusterName=bench
SlurmctldHost=$node(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF

stop
sleep 1
runuser -u munge -- /usr/sbin/munged --pid-file="$run/munge/munged.pid"
slurmctld
slurmd
for _ in $(seq 30); do
  if sinfo -h -o %T 2>/dev/null | grep -q -E '^(idle|mixed|allocated)'; then
    sinfo
    exit 0
  fi
  sleep 1
done
echo "slurm_localhost.sh: the node did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
exit 1
