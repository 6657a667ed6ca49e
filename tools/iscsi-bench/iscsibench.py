# SPDX-License-Identifier: MIT
"""tools/iscsi-bench/iscsibench.py: what the local benchmarks share (run: every path and
job side by side; scale: ulp-targetd's workers against sessions): the targets on 127.0.0.1
(ulp-targetd with a TCP, an iSER and an SRP portal; tgtd on a private control port), every
process stopped by its pid with bounded waits, ulp-initiator's command line and its JSON,
the target's CPU from /proc, and the table's number formats.

See tools/iscsi-bench/README.md.
"""

import json
import os
import random
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
BLOCK = 512  # logical block size of both LUNs (ulp-targetd: bs=512; tgtd's default)
ULP_IQN = "iqn.2026-11.org.ulp:bench"
TGT_IQN = "iqn.2026-11.org.ulp:bench-tgt"

# tgtd's session keys, set to what ulp-targetd declares by default (tools/ulp-targetd/
# config.cc), so that both targets negotiate the same segments, bursts and R2T behaviour;
# --tgtd-defaults leaves tgtd's own.
TGTD_KEYS = [
    ("MaxRecvDataSegmentLength", "262144"),
    ("MaxXmitDataSegmentLength", "262144"),
    ("MaxBurstLength", "1048576"),
    ("FirstBurstLength", "65536"),
    ("ImmediateData", "Yes"),
    ("InitialR2T", "No"),
]


class StepFailed(Exception):
    pass


TAG = "iscsi-bench"  # the log lines' prefix; a program may set its own


def log(msg):
    print(TAG + ": " + msg, file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def cpu_seconds(pid):
    """utime + stime of the whole process (every thread, live and exited), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_group(name):
    """A thread's name without its instance numbers: ksoftirqd/1 -> ksoftirqd,
    kworker/0:1H-kblockd -> kworker, iou-wrk-123 -> iou-wrk."""
    return re.split(r"[/:]", name, maxsplit=1)[0].rstrip("-.0123456789") or name


def thread_switches():
    """Context switches and CPU time of every thread of this machine (vmbench: of the
    guest), by (pid, tid): (group, all switches, involuntary ones, CPU ticks, of which in
    the kernel), group being thread_group() of its name. Involuntary: preempted while it
    could still run."""
    n = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    name, cs, ics = "", 0, 0
                    for line in f:
                        if line.startswith("Name:"):
                            name = line.split(":", 1)[1].strip()
                        elif "ctxt_switches:" in line:
                            cs += int(line.split()[1])
                            if line.startswith("nonvoluntary"):
                                ics += int(line.split()[1])
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
                    ticks = int(st[11]) + int(st[12])  # utime + stime
                    sticks = int(st[12])
            except OSError:
                continue  # ended meanwhile
            n[(pid, tid)] = (thread_group(name), cs, ics, ticks, sticks)
    return n


def switches_by_group(before, after, ios, which=1):
    """Context switches per I/O between two thread_switches samples, by thread group,
    largest first (threads that ended meanwhile are lost: a floor). which: 1 all, 2 the
    involuntary ones, 3 CPU ticks, 4 of them in the kernel."""
    g = {}
    for k, v in after.items():
        g[v[0]] = g.get(v[0], 0) + v[which] - before.get(k, (v[0], 0, 0, 0, 0))[which]
    return {k: v / ios for k, v in sorted(g.items(), key=lambda kv: -kv[1]) if v > 0}


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    """Every process this run starts, stopped by its pid, each wait bounded."""

    def __init__(self):
        self.procs = []

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10.0):
        """sig, then SIGKILL after timeout; reaps. Its exit status, or None if it was killed."""
        if p.poll() is None:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log("pid %d did not die after SIGKILL" % p.pid)
                return None
        if p in self.procs:
            self.procs.remove(p)
        return p.returncode

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p, timeout=5.0)


def run_bounded(procs, argv, timeout, out_path):
    """Runs argv with stdout+stderr to out_path, at most timeout seconds (then SIGTERM,
    SIGKILL). Returns (status or None when it had to be stopped, output, client CPU s)."""
    c0 = children_cpu()
    with open(out_path, "wb") as out:
        p = procs.start(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = p.wait(timeout=timeout)
            procs.procs.remove(p)
        except subprocess.TimeoutExpired:
            procs.stop(p, timeout=5.0)
            rc = None
    cpu = children_cpu() - c0
    with open(out_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return rc, text, cpu


# ---- targets --------------------------------------------------------------------------------

class Daemon:
    """What both targets' handles share: the process (self.p) and its log file."""

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def alive(self):
        return self.p is not None and self.p.poll() is None


class Targetd(Daemon):
    def __init__(self, procs, path, work, lun_spec, extra):
        self.procs, self.path, self.work = procs, path, work
        self.lun_spec, self.extra = lun_spec, extra
        self.p = None
        self.log_path = os.path.join(work, "ulp-targetd.log")

    def start(self):
        r, w = os.pipe()
        argv = [self.path, "--portal", "127.0.0.1:0", "--iser-portal", "127.0.0.1:0",
                "--srp-portal", "127.0.0.1:0", "--ready-fd", str(w), "--target", ULP_IQN, "--lun", self.lun_spec] + self.extra
        with open(self.log_path, "wb") as lf:
            self.p = self.procs.start(argv, stdout=lf, stderr=subprocess.STDOUT, pass_fds=(w,))
        os.close(w)
        text = b""
        deadline = time.monotonic() + 15
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    break
                chunk = os.read(r, 256)
                if not chunk:
                    break  # the daemon closes it once listening
                text += chunk
        finally:
            os.close(r)
        m = re.match(rb"(\d+)\niser (\d+)\nsrp (\d+)\n", text)
        if not m:
            raise StepFailed("ulp-targetd did not come up (ready fd said %r): %s"
                             % (text, self.log()))
        self.tcp_port, self.iser_port, self.srp_port = (int(m.group(1)), int(m.group(2)),
                                                        int(m.group(3)))
        # The SRP target port's identifiers, from the add_target line it logs.
        ids = re.search(r"id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16}", self.log())
        if not ids:
            raise StepFailed("ulp-targetd logged no add_target line: %s" % self.log())
        self.srp_target = ids.group(0)
        self.pid = self.p.pid

    def stop(self):
        if self.p is None:
            return
        rc = self.procs.stop(self.p, signal.SIGTERM, timeout=15.0)
        self.p = None
        if rc != 0:
            raise StepFailed("ulp-targetd did not stop cleanly on SIGTERM (status %s): %s"
                             % (rc, self.log()))


class Tgtd(Daemon):
    """tgtd on a private control port (tgtadm -C N) and a free TCP port. Its LUN 0 is its
    controller: the file is LUN 1."""

    def __init__(self, procs, work, file_path, keys):
        self.procs, self.work, self.file_path, self.keys = procs, work, file_path, keys
        self.p = None
        self.control = None
        self.log_path = os.path.join(work, "tgtd.log")

    def tgtadm(self, args, timeout=10):
        argv = ["tgtadm", "-C", str(self.control), "--lld", "iscsi"] + args
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout, text=True)
        except subprocess.TimeoutExpired:
            return False, "tgtadm timed out: %s" % " ".join(argv)
        return r.returncode == 0, (r.stdout + r.stderr).strip()

    def must(self, args):
        ok, out = self.tgtadm(args)
        if not ok:
            raise StepFailed("tgtadm %s failed: %s" % (" ".join(args), out))
        return out

    def start(self):
        if os.geteuid() != 0:
            raise StepFailed("tgtd needs root")
        why = ""
        ok = False
        for _attempt in range(3):
            self.control = random.randint(1000, 8999)  # tgtd takes small numbers only
            sock = "/var/run/tgtd/socket.%d" % self.control
            if os.path.exists(sock) or os.path.exists(sock + ".lock"):
                continue
            self.port = free_port()
            with open(self.log_path, "wb") as lf:
                self.p = self.procs.start(
                    ["tgtd", "-f", "-C", str(self.control), "--iscsi",
                     "portal=127.0.0.1:%d" % self.port],
                    stdout=lf, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.p.poll() is not None:
                    break
                ok, why = self.tgtadm(["--op", "show", "--mode", "target"])
                if ok:
                    break
                time.sleep(0.05)
            if self.p.poll() is None and ok and self.listening():
                break
            why = "tgtd did not come up: %s %s" % (why, self.log())
            # Its socket files did not exist before it started (checked above): its own.
            self.kill()
        else:
            raise StepFailed(why or "no free tgtd control port")
        self.pid = self.p.pid
        self.must(["--op", "new", "--mode", "target", "--tid", "1", "-T", TGT_IQN])
        self.must(["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1",
                   "-b", self.file_path])
        self.must(["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"])
        for k, v in self.keys:
            self.must(["--op", "update", "--mode", "target", "--tid", "1", "-n", k, "-v", v])
        self.params = self.must(["--op", "show", "--mode", "target", "--tid", "1"])

    def listening(self):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def kill(self):
        if self.p is not None:
            self.procs.stop(self.p, signal.SIGKILL, timeout=10.0)
            self.p = None
        self.cleanup_socket()

    def cleanup_socket(self):
        if self.control:
            for suffix in ("", ".lock"):
                try:
                    os.unlink("/var/run/tgtd/socket.%d%s" % (self.control, suffix))
                except OSError:
                    pass

    def stop(self):
        """tgtd ignores SIGTERM while it has targets: delete ours, then the system."""
        if self.p is None:
            return
        self.tgtadm(["--op", "delete", "--mode", "target", "--tid", "1", "--force"])
        self.tgtadm(["--op", "delete", "--mode", "system"])
        self.procs.stop(self.p, signal.SIGTERM, timeout=10.0)
        self.p = None
        self.cleanup_socket()


# ---- clients --------------------------------------------------------------------------------

def initiator_argv(exe, targetd, tgtd, transport, target, job, runtime, extra=()):
    """ulp-initiator's command line for one session of job on one path (target
    "ulp-targetd" over tcp, iser or srp; "tgtd" over tcp), --no-verify --json (pure speed,
    the figures as JSON on stdout)."""
    if target == "ulp-targetd":
        port = {"iser": targetd.iser_port, "srp": targetd.srp_port,
                "tcp": targetd.tcp_port}[transport]
        iqn, lun = ULP_IQN, 0
    else:
        port, iqn, lun = tgtd.port, TGT_IQN, 1
    # SRP has no target name: the port's identifiers instead (one channel, as iSCSI has
    # one connection per session here).
    who = (["--srp-target", targetd.srp_target] if transport == "srp" else ["-t", iqn])
    return [exe, "-p", "127.0.0.1:%d" % port, "--transport", transport] + who + [
        "-l", str(lun), "-w", job["workload"], "--bs", str(job["bs"]),
        "--qd", str(job["qd"]), "--runtime", str(runtime), "--no-verify", "--json"] + list(extra)


def initiator_result(rc, out):
    """ulp-initiator's JSON from its output, checked: exit 0, ok, no errors; or StepFailed."""
    if rc != 0:
        raise StepFailed("ulp-initiator exited with %s: %s" % (rc, out[-2000:]))
    try:
        j = json.loads(out[out.index("{"):out.rindex("}") + 1])
    except ValueError:
        raise StepFailed("ulp-initiator printed no JSON: %s" % out[-2000:])
    if not j.get("ok") or j.get("errors"):
        raise StepFailed("ulp-initiator reported a failed run: %s" % out[-2000:])
    return j


# ---- the run's common steps -----------------------------------------------------------------

def make_lun_file(path, mib):
    """The LUN file, allocated (tmpfs: real pages, so reads do not hit holes)."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, mib << 20)
    finally:
        os.close(fd)


def interrupt_on_signals():
    """SIGTERM and SIGHUP raise KeyboardInterrupt, so that the run's finally stops
    everything it started, as on ^C."""
    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)


def busy(la):
    """Whether a 1-minute load average says other work shares the machine."""
    return la[0] > NCPU * 0.5


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def fmt(v, spec, width):
    return ("-" if v is None else format(v, spec)).rjust(width)


def fmt_ratio(v):
    return "-" if v is None else "%.2fx" % v

