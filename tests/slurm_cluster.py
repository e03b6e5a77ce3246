"""A real single-node Slurm cluster for tests (Debian's slurm-wlm 22.05 and munge), on this machine.

:func:`start` installs ``slurm-wlm`` and ``munge`` with apt when ``slurmctld`` is missing (we run as
root in CI; if that is impossible the test fails, it is not skipped), starts ``munged`` as user
``munge`` with a generated key, writes a ``slurm.conf`` (SlurmUser=root, auth/munge,
proctrack/linuxproc, task/none, no accounting, select/cons_tres, one node with this machine's CPUs,
no cgroup.conf) with free ports and private state directories, and starts ``slurmctld`` and
``slurmd`` in the foreground. :meth:`Cluster.stop` cancels every job, waits for them to end and
stops the daemons by their pids.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

APT_PACKAGES = ("slurm-wlm", "munge")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install() -> None:
    """apt-get install slurm-wlm and munge unless slurmctld is there; AssertionError if that fails."""
    if shutil.which("slurmctld") and shutil.which("munged"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:  # stale package lists: update once, then again
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and shutil.which("slurmctld"), \
        f"could not install {' '.join(APT_PACKAGES)} with apt: {proc.stderr[-2000:]}"


@dataclass
class Cluster:
    root: Path
    conf: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=60)

    def jobs(self) -> list[str]:
        """Ids of every job the controller still lists."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted((self.root / "log").glob("*.log")))

    def stop(self) -> None:
        """Cancel every job, wait (15 s at most) for them to end, then stop the daemons by pid."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                ids = self.jobs()
                if ids:
                    self.run("scancel", *ids)
                t0 = time.monotonic()
                while self.jobs() and time.monotonic() - t0 < 15:
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _wait_for(what: str, ok, cluster: Cluster, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if ok():
            return
        dead = [n for n, p in cluster.procs.items() if p.poll() is not None]
        assert not dead, f"{', '.join(dead)} exited while waiting for {what}:\n{cluster.logs()}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}:\n{cluster.logs()}")


def start(cpus: int = 2) -> Cluster:
    """Install (if needed) and start the cluster; the caller must call :meth:`Cluster.stop`."""
    install()
    # munged insists on a socket directory every user can traverse: not under pytest's 0700 tmp dirs
    root = Path(tempfile.mkdtemp(prefix="posym-slurm-"))
    root.chmod(0o755)
    cluster = Cluster(root=root, conf=root / "slurm.conf")
    try:
        munge = root / "munge"
        munge.mkdir(mode=0o711)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        shutil.chown(munge, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        sock = munge / "munge.socket"
        cluster.procs["munged"] = subprocess.Popen(
            ["munged", "-F", f"--key-file={key}", f"--socket={sock}", f"--pid-file={munge / 'munged.pid'}",
             f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
            user="munge", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for("munged", sock.exists, cluster)
        for d in ("state", "spool", "log"):
            (root / d).mkdir()
        host = socket.gethostname()
        cpus = max(1, min(cpus, os.cpu_count() or 1))
        cluster.conf.write_text("\n".join([
            "ClusterName=posymtest", f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={sock}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "SchedulerType=sched/builtin",
            "MpiDefault=none", "MailProg=/bin/true", "ReturnToService=2", "KillWait=5", "MinJobAge=600",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
        for daemon in ("slurmctld", "slurmd"):
            cluster.procs[daemon] = subprocess.Popen([daemon, "-D", "-f", str(cluster.conf)], env=cluster.env,
                                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for("an idle node", lambda: cluster.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster
