# SPDX-License-Identifier: MIT
"""tools/iscsi-bench/vmbench.py: what the VM benchmarks share (vm-iser: the Linux iSER
initiator; vm-srp: the Linux SRP initiator): a Linux initiator with fio against several
targets on rxe0 in ONE VM run (tools/vm/run), the same jobs side by side.

A script gives its targets (objects with name, lun, start() -> pid or None, stop()) and
its initiator (login(target) -> block device, logout()); this module runs the jobs, takes
the figures and prints the table and the ratios against ulp-targetd:

  IOPS, MB/s, completion latency p50/p99 from fio (libaio, O_DIRECT, time-based); guest
  CPU per I/O (every CPU of the VM, busy time over the job's I/Os: initiator, rxe and
  target together, the one figure that covers a kernel target's threads) and, for
  userspace targets, the target process's own CPU per I/O; context switches per I/O, of
  the guest and of the target process (thread hops and sleeps: under TCG each costs tens
  of microseconds).

Under TCG, rxe computes its CRCs in emulated software: the figures compare stacks within
one run and say nothing about hardware.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IP = "10.99.0.1"
JOBS = [  # name, fio rw, bs, iodepth
    ("randread 4k qd32", "randread", "4k", 32),
    ("randwrite 4k qd32", "randwrite", "4k", 32),
    ("seqread 128k qd8", "read", "128k", 8),
    ("seqwrite 128k qd8", "write", "128k", 8),
]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TAG = os.path.basename(sys.argv[0])  # the log lines' prefix: "vm-iser", "vm-srp"


class Fail(Exception):
    pass


def log(msg):
    print(f"{TAG}: {msg}", flush=True)


def sh(cmd, timeout=60, check=True, **kw):
    """Run cmd (a list), bounded; its output returned; Fail on a bad status."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise Fail(f"{' '.join(cmd)}: still running after {timeout} s")
    if check and r.returncode != 0:
        raise Fail(f"{' '.join(cmd)}: status {r.returncode}: {r.stdout}{r.stderr}".strip())
    return r


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def wait_for(what, pred, bound):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise Fail(f"{what}: not within {bound} s")


def proc_cpu(pid):
    """utime + stime of every thread of pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_switches(pid):
    """Context switches (voluntary and not) of each thread of pid, by thread id: thread hops
    and sleeps."""
    n = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                n[tid] = sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return n


def switches_since(before, after):
    """Switches between two proc_switches samples: threads born since count from 0; those
    that ended meanwhile (io_uring's workers come and go) are lost, so this is a floor."""
    return sum(v - before.get(tid, 0) for tid, v in after.items())


def thread_switches():
    """Context switches and CPU time of every thread in the guest, by (pid, tid): (group, all
    switches, involuntary ones, CPU ticks, of which in the kernel), group being the thread's name without its
    instance numbers (ksoftirqd/1 -> ksoftirqd, kworker/0:1H-kblockd -> kworker, iou-wrk-123
    -> iou-wrk). Involuntary: preempted while it could still run."""
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
            group = re.split(r"[/:]", name, maxsplit=1)[0].rstrip("-.0123456789") or name
            n[(pid, tid)] = (group, cs, ics, ticks, sticks)
    return n


def switches_by_group(before, after, ios, which=1):
    """Context switches per I/O between two thread_switches samples, by thread group,
    largest first (threads that ended meanwhile are lost: a floor). which: 1 all, 2 the
    involuntary ones, 3 CPU ticks, 4 of them in the kernel."""
    g = {}
    for k, v in after.items():
        g[v[0]] = g.get(v[0], 0) + v[which] - before.get(k, (v[0], 0, 0, 0, 0))[which]
    return {k: v / ios for k, v in sorted(g.items(), key=lambda kv: -kv[1]) if v > 0}


def guest_switches():
    """Context switches of the whole guest since boot (/proc/stat ctxt)."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("ctxt "):
                return int(line.split()[1])
    return 0


def guest_busy():
    """Busy CPU seconds of the whole guest (every CPU: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / CLK_TCK


def lun_file(quick, name):
    """The LUN file every file-backed target serves: on ext4, as a storage target's would,
    on a loop device over guest RAM (the guest kernel's (6.1) tmpfs and overlayfs refuse
    RWF_NOWAIT and O_DIRECT, so a file there would take paths no real deployment takes).
    Written, not fallocated: every target then reads from the page cache, as the reads of a
    hot LUN do; unwritten extents would be read cold. Returns (path, size, size_bytes)."""
    size = "64M" if quick else "256M"
    size_bytes = (64 if quick else 256) << 20
    fs_img, mnt = f"/dev/shm/{name}-fs.img", f"/mnt/{name}"
    with open(fs_img, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, size_bytes + (64 << 20))
    sh(["modprobe", "loop"], check=False)
    sh(["mkfs.ext4", "-q", "-F", fs_img])
    os.makedirs(mnt, exist_ok=True)
    sh(["mount", "-o", "loop", fs_img, mnt])
    img = os.path.join(mnt, "lun.img")
    with open(img, "wb") as f:
        chunk = bytes(1 << 20)
        for _ in range(size_bytes >> 20):
            f.write(chunk)
    return img, size, size_bytes


def run_job(dev, job, runtime, size, pid, out_json):
    name, rw, bs, qd = job
    cmd = ["fio", "--output-format=json", f"--output={out_json}", "--name=job",
           f"--filename={dev}", "--ioengine=libaio", "--direct=1", f"--rw={rw}",
           f"--bs={bs}", f"--iodepth={qd}", f"--size={size}", "--time_based",
           f"--runtime={runtime}", "--randrepeat=0", "--norandommap"]
    t0 = proc_cpu(pid) if pid else 0.0
    s0 = proc_switches(pid) if pid else {}
    g0, c0, a0 = guest_busy(), guest_switches(), thread_switches()
    sh(cmd, timeout=runtime + 90)
    g1, c1, a1 = guest_busy(), guest_switches(), thread_switches()
    t1 = proc_cpu(pid) if pid else 0.0
    s1 = proc_switches(pid) if pid else {}
    with open(out_json) as f:
        j = json.load(f)["jobs"][0]
    d = j["read"] if rw in ("randread", "read") else j["write"]
    ios = d["total_ios"]
    if ios == 0 or j["error"] != 0:
        raise Fail(f"fio {name} on {dev}: {ios} I/Os, error {j['error']}")
    pct = d["clat_ns"].get("percentile", {})
    return {
        "iops": d["iops"],
        "mbps": d["bw_bytes"] / 1e6,
        "p50_us": pct.get("50.000000", 0) / 1e3,
        "p99_us": pct.get("99.000000", 0) / 1e3,
        "guest_us_per_io": (g1 - g0) * 1e6 / ios,
        "target_us_per_io": (t1 - t0) * 1e6 / ios if pid else None,
        "guest_cs_per_io": (c1 - c0) / ios,
        "target_cs_per_io": switches_since(s0, s1) / ios if pid else None,
        "cs_per_io_by_thread": switches_by_group(a0, a1, ios),
        "ics_per_io_by_thread": switches_by_group(a0, a1, ios, 2),
        "cpu_us_per_io_by_thread": {k: v * 1e6 / CLK_TCK for k, v in
                                    switches_by_group(a0, a1, ios, 3).items()},
        "sys_us_per_io_by_thread": {k: v * 1e6 / CLK_TCK for k, v in
                                    switches_by_group(a0, a1, ios, 4).items()},
        "ios": ios,
    }


def run_targets(targets, initiator, args, size, title):
    """In the guest: for each target, start it, log in, run the jobs, log out, stop it; a
    target that fails is reported and the next one runs. Prints the table; writes
    results.json to args.out. 0 when every target ran every job, 1 otherwise."""
    results = {}
    failed = []
    order = [t.name for t in targets]
    for t in targets:
        try:
            pid = t.start()
            dev = initiator.login(t)
            log(f"{t.name}: logged in, LUN {t.lun} is {dev}")
            for job in JOBS:
                r = run_job(dev, job, args.runtime, size, pid,
                            os.path.join(args.out, f"fio-{t.name}-{job[1]}-{job[2]}.json"))
                results[(job[0], t.name)] = r
                log(f"{t.name}: {job[0]}: {r['iops']:.0f} IOPS, {r['mbps']:.1f} MB/s")
            initiator.logout()
            t.stop()
        except Fail as e:
            log(f"FAIL: {t.name}: {e}")
            failed.append(t.name)
            initiator.cleanup()
            try:
                t.stop()
            except Exception as e2:  # already broken: say so, go on with the next
                log(f"{t.name}: stop: {e2}")
    print_table(results, order, args, title)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump([{"job": k[0], "target": k[1], **v} for k, v in results.items()], f,
                  indent=1)
    if failed:
        log(f"targets that did not complete: {', '.join(failed)}")
        return 1
    return 0


def print_table(results, order, args, title):
    print()
    print(f"{title} (fio, libaio, O_DIRECT) on rxe0 in the VM, {args.runtime} s per job; the "
          f"figures compare targets within this run only")
    hdr = (f"{'job':<18} {'target':<12} {'IOPS':>8} {'MB/s':>8} {'p50 us':>9} {'p99 us':>9} "
           f"{'guest us/IO':>12} {'tgt us/IO':>10} {'guest cs/IO':>12} {'tgt cs/IO':>10}")
    print(hdr)
    print("-" * len(hdr))
    for job in JOBS:
        first = True
        for t in order:
            r = results.get((job[0], t))
            if not r:
                continue
            tgt = f"{r['target_us_per_io']:.1f}" if r["target_us_per_io"] is not None else "-"
            tcs = f"{r['target_cs_per_io']:.2f}" if r["target_cs_per_io"] is not None else "-"
            print(f"{job[0] if first else '':<18} {t:<12} {r['iops']:>8.0f} {r['mbps']:>8.2f} "
                  f"{r['p50_us']:>9.0f} {r['p99_us']:>9.0f} {r['guest_us_per_io']:>12.1f} "
                  f"{tgt:>10} {r['guest_cs_per_io']:>12.2f} {tcs:>10}")
            first = False
    print()
    by_thread(results, order, "context switches per I/O by guest thread (the largest five, "
              "the involuntary ones in brackets; a switch in and out of the CPU idle loop "
              "counts in swapper's, which /proc does not list):",
              "cs_per_io_by_thread", "ics_per_io_by_thread", ".2f")
    by_thread(results, order, "CPU per I/O by guest thread, us (the largest five; in the "
              "kernel in brackets):", "cpu_us_per_io_by_thread", "sys_us_per_io_by_thread",
              ".1f")
    print("ratios ulp-targetd / other (IOPS > 1 is faster; p50 and guest CPU per I/O < 1 "
          "are better):")
    for job in JOBS:
        u = results.get((job[0], "ulp-targetd"))
        for t in order[1:] if order and order[0] == "ulp-targetd" else []:
            o = results.get((job[0], t))
            if u and o:
                print(f"  {job[0]:<18} vs {t:<5}  IOPS {u['iops'] / o['iops']:.2f}x  "
                      f"p50 {u['p50_us'] / max(o['p50_us'], 1e-9):.2f}x  "
                      f"guest CPU/IO {u['guest_us_per_io'] / o['guest_us_per_io']:.2f}x")


def by_thread(results, order, title, key, part_key, fmt):
    """Print a per-thread figure of every job and target: the largest five groups, each
    with the part part_key gives in brackets."""
    print(title)
    for job in JOBS:
        for t in order:
            r = results.get((job[0], t))
            if r and r.get(key):
                part = r.get(part_key, {})
                print(f"  {job[0]:<18} {t:<12} " + "  ".join(
                    f"{k} {v:{fmt}} ({part.get(k, 0):{fmt}})"
                    for k, v in list(r[key].items())[:5]))
    print()


def launch(script, args, targets, per_target_extra_s=60):
    """On the host: run script --in-guest in the VM (tools/vm/run) with args' options, its
    results shared through args.out (kept there when given, else a temporary folder).
    tools/vm/run's status: 0, 77 (no VM: skipped), 1..."""
    keep = args.out is not None
    out = os.path.abspath(args.out) if keep else tempfile.mkdtemp(prefix=f"{TAG}-")
    os.makedirs(out, exist_ok=True)
    timeout = args.timeout or (
        240 + len(targets) * (len(JOBS) * (args.runtime + 20) + per_target_extra_s))
    cmd = [os.path.join(ROOT, "tools/vm/run"), "--timeout", str(timeout), "--share", out,
           "--", sys.executable, os.path.abspath(script), "--in-guest",
           "--runtime", str(args.runtime), "--targetd", os.path.abspath(args.targetd),
           "--out", "/run/ulp-vm", "--only", ",".join(targets)]
    if args.quick:
        cmd.append("--quick")
    if args.targetd_args:
        cmd.append(f"--targetd-args={args.targetd_args}")
    cmd += getattr(args, "guest_extra", [])
    rc = subprocess.call(cmd)
    if keep:
        print(f"{TAG}: raw results in {out}")
    else:
        shutil.rmtree(out, ignore_errors=True)
    return rc


def add_common_args(ap, targets):
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runtime", type=int, default=None)
    ap.add_argument("--targetd",
                    default=os.path.join(ROOT, "build/tools/ulp-targetd/ulp-targetd"))
    ap.add_argument("--targetd-args", default="",
                    help="more ulp-targetd arguments, as one string (e.g. "
                         "\"--srp-srq\")")
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=int, default=None)
    ap.add_argument("--only", default=",".join(targets))
    ap.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)


def check_common_args(ap, args, targets):
    args.only = [t for t in args.only.split(",") if t]
    for t in args.only:
        if t not in targets:
            ap.error(f"--only: unknown target {t!r} ({', '.join(targets)})")
    if args.runtime is None:
        args.runtime = 3 if args.quick else 10
    if not args.in_guest and not os.access(args.targetd, os.X_OK):
        ap.error(f"{args.targetd} is not built")
