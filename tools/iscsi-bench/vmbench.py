# SPDX-License-Identifier: MIT
"""tools/iscsi-bench/vmbench.py: what the VM benchmarks share (vm-iser: the Linux iSER
initiator; vm-srp: the Linux SRP initiator): a Linux initiator with fio against several
targets on rxe0 in ONE VM run (tools/vm/run), the same jobs side by side.

A script gives its targets (objects with name, lun, start() -> pid or None, stop(), and a
round attribute this module sets before each start) and its initiator (login(target) ->
block device, logout()); this module runs the jobs, takes the figures and prints the table
and the ratios against ulp-targetd:

  IOPS, MB/s, completion latency p50/p99 from fio (libaio, O_DIRECT, time-based); guest
  CPU per I/O (every CPU of the VM, busy time over the job's I/Os: initiator, rxe and
  target together, the one figure that covers a kernel target's threads) and, for
  userspace targets, the target process's own CPU per I/O; context switches per I/O, of
  the guest and of the target process (thread hops and sleeps: under TCG each costs tens
  of microseconds).

With --rounds N the whole set of targets runs N times in the one VM boot, the order
rotated each round (A B C, then B C A, ...), so that no target always runs first or
last; the table gives each figure's median over the rounds with its min-max, the ratios
come from the medians, and each round's IOPS is printed too.

The LUN is what the script's --backing names: a RAM disk of the target's own, a file
(lun_file), or one brd device, /dev/ram0, that every target serves as a block device
(Brd): filled once at the start, so every target reads allocated pages, and checked
before each target to be the same device, claimed by nobody, with no page cache of it
left by the previous target.

Under TCG, rxe computes its CRCs in emulated software: the figures compare stacks within
one run and say nothing about hardware.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from iscsibench import median, switches_by_group, thread_group, thread_switches

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IP = "10.99.0.1"
JOBS = [  # name, fio rw, bs, iodepth
    ("randread 4k qd32", "randread", "4k", 32),
    ("randwrite 4k qd32", "randwrite", "4k", 32),
    ("seqread 128k qd8", "read", "128k", 8),
    ("seqwrite 128k qd8", "write", "128k", 8),
]
# Jobs run only when --jobs names them: I/Os larger than Linux's largest command to a LUN
# (its max_sectors_kb, from the LUN's OPTIMAL TRANSFER LENGTH and the initiator's own
# limit), which the block layer splits: the table's cmds/IO says into how many.
EXTRA_JOBS = [
    ("seqread 1m qd4", "read", "1m", 4),
    ("seqwrite 1m qd4", "write", "1m", 4),
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


def disk_requests(dev):
    """Requests the initiator's disk (/dev/sdX) completed, reads and writes: its block
    layer splits an I/O into several when its pages exceed the SCSI host's segments
    (ib_srp's sg_tablesize, 12 by default, when fio's buffer is not physically
    contiguous), and each request is a command the target answers."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = [int(x) for x in f.read().split()]
    return v[0] + v[4]


def lun_size(quick):
    """The LUN's size: ("64M", bytes) with --quick, ("256M", bytes) otherwise."""
    return ("64M", 64 << 20) if quick else ("256M", 256 << 20)


class Brd:
    """--backing block: one brd RAM disk, /dev/ram0, of the LUN's size, that every target
    serves as a block device (ulp-targetd's block backstore with O_DIRECT, LIO's iblock,
    tgtd's rdwr). brd allocates a page at its first write and reads a hole as zeros
    without one: the whole device is written once here, so every target reads allocated
    pages."""

    DEV = "/dev/ram0"

    def __init__(self, quick):
        self.size, self.size_bytes = lun_size(quick)
        sh(["modprobe", "brd", "rd_nr=1", f"rd_size={self.size_bytes >> 10}"])
        wait_for(self.DEV, lambda: os.path.exists(self.DEV), 10)
        sh(["dd", "if=/dev/zero", f"of={self.DEV}", "bs=1M", "oflag=direct",
            f"count={self.size_bytes >> 20}"], timeout=300)
        self.ident = self.identity()
        if self.ident[1] != self.size_bytes:
            raise Fail(f"{self.DEV}: {self.ident[1]} bytes, not {self.size_bytes} (brd "
                       f"loaded before with another rd_size?)")

    def identity(self):
        """(device number, size in bytes) of /dev/ram0."""
        with open("/sys/block/ram0/size") as f:
            return os.stat(self.DEV).st_rdev, int(f.read()) * 512

    def settle(self):
        """Before each target: the same device as at the start, claimed by nobody (the
        previous target gave it back), and no page cache of it (tgtd's rdwr reads and
        writes through it) left for the next target to find."""
        if self.identity() != self.ident:
            raise Fail(f"{self.DEV} is not the device of the start: {self.identity()} "
                       f"against {self.ident}")
        try:
            # O_EXCL on a block device without O_CREAT: an exclusive open, EBUSY while
            # another holder (LIO's iblock, ulp-targetd's block backstore) has it.
            os.close(os.open(self.DEV, os.O_RDONLY | os.O_EXCL))
        except OSError as e:
            raise Fail(f"{self.DEV} still claimed after the previous target: {e}")
        sh(["sync"])
        write("/proc/sys/vm/drop_caches", "3")

    def describe(self):
        return (f"{self.DEV} (brd, {self.size}, written once at start; the same device for "
                f"every target, its page cache dropped before each)")


LIO_CFS = "/sys/kernel/config/target"


def lio_backstore(cfs, backing, img, size_bytes):
    """LIO's backstore "vmbench" for --backing, made through cfs (a Configfs: undone at
    the target's stop) and enabled; returns its configfs path. ram: an rd_mcp RAM disk of
    its own; block: iblock on the brd device img; file: fileio on the file img, buffered,
    as the userspace targets serve it through the page cache."""
    for m in ["target_core_mod", "target_core_file", "target_core_iblock"]:
        sh(["modprobe", m], check=False)
    if not os.path.isdir(LIO_CFS):
        raise Fail(f"LIO: no {LIO_CFS} after modprobe target_core_mod")
    if backing == "ram":
        core = f"{LIO_CFS}/core/rd_mcp_0/vmbench"
        control = f"rd_pages={size_bytes // 4096}"
    elif backing == "block":
        core = f"{LIO_CFS}/core/iblock_0/vmbench"
        control = f"udev_path={img}"
    else:
        core = f"{LIO_CFS}/core/fileio_0/vmbench"
        control = f"fd_dev_name={img},fd_dev_size={size_bytes},fd_buffered_io=1"
    cfs.mkdir(core)
    write(f"{core}/control", control)
    write(f"{core}/enable", "1")
    return core


class Configfs:
    """What a LIO target made in configfs, undone in reverse order at its stop, so that
    the next round (or the next target) finds no backstore claiming the LUN's storage, no
    listener on its port and no leftover directory."""

    def __init__(self):
        self.made = []  # ("dir" | "link", path), in the order made

    def mkdir(self, path):
        """mkdir -p, remembering each directory it made (configfs makes a group's default
        groups itself: those are not ours to remove)."""
        parts = path.rstrip("/").split("/")
        for i in range(2, len(parts) + 1):
            p = "/".join(parts[:i])
            if not os.path.isdir(p):
                os.mkdir(p)
                self.made.append(("dir", p))

    def symlink(self, src, dst):
        os.symlink(src, dst)
        self.made.append(("link", dst))

    def undo(self):
        errors = []
        while self.made:
            kind, p = self.made.pop()
            try:
                (os.unlink if kind == "link" else os.rmdir)(p)
            except FileNotFoundError:
                pass
            except OSError as e:
                errors.append(f"{p}: {e}")
        if errors:
            raise Fail("configfs teardown: " + "; ".join(errors))


def lun_file(quick, name):
    """The LUN file every file-backed target serves: on ext4, as a storage target's would,
    on a loop device over guest RAM (the guest kernel's (6.1) tmpfs and overlayfs refuse
    RWF_NOWAIT and O_DIRECT, so a file there would take paths no real deployment takes).
    Written, not fallocated: every target then reads from the page cache, as the reads of a
    hot LUN do; unwritten extents would be read cold. Returns (path, size, size_bytes)."""
    size, size_bytes = lun_size(quick)
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


# --trace-rxe: rxe's functions whose calls measure the work an I/O costs it (rdma_rxe in
# Linux 6.1): packets sent and received, payload copies between an MR and a packet, runs
# of each QP task (one packet or ACK each, plus the run that finds nothing), CQEs, tasklets
# handed to softirq context, and uverbs write() calls (a user QP's doorbell or CQ arm).
RXE_FUNCS = ["rxe_xmit_packet", "rxe_rcv", "rxe_mr_copy", "rxe_requester", "rxe_responder",
             "rxe_completer", "rxe_cq_post", "__tasklet_schedule", "ib_uverbs_write",
             "retransmit_timer", "rnr_nak_timer"]
TRACEFS = "/sys/kernel/tracing"
# And every packet rxe sends, by a kprobe event on rxe_xmit_packet(qp, pkt, skb): the
# sending QP's number (struct rxe_qp begins with struct ib_qp, qp_num at 176), the BTH
# opcode and PSN from struct rxe_pkt_info (opcode at 45, psn at 36, hdr at 24: the BTH),
# and two words after the BTH: an ACK's AETH syndrome (IB spec 9.7.5.1.3) and a READ
# request's RETH DMA length (big-endian). The offsets are those of Debian's 6.1 rdma_rxe,
# read from its BTF (vmlinux's for struct ib_qp).
RXE_PKT_PROBE = ("p:ulp/rxe_pkt rdma_rxe:rxe_xmit_packet qpn=+176(%di):u32 op=+45(%si):u8 "
                 "psn=+36(%si):u32 syn=+12(+24(%si)):u8 rlen=+24(+24(%si)):u32")
RC_OPCODES = {0: "SEND_FIRST", 1: "SEND_MIDDLE", 2: "SEND_LAST", 4: "SEND_ONLY",
              6: "WRITE_FIRST", 7: "WRITE_MIDDLE", 8: "WRITE_LAST", 10: "WRITE_ONLY",
              12: "READ_REQUEST", 13: "READ_RESP_FIRST", 14: "READ_RESP_MIDDLE",
              15: "READ_RESP_LAST", 16: "READ_RESP_ONLY", 17: "ACK", 22: "SEND_LAST_INV",
              23: "SEND_ONLY_INV"}


def rxe_pkt_probe():
    """The ulp/rxe_pkt kprobe event, made once per boot; False (and said once) on a kernel
    other than 6.1, whose structures may lie elsewhere: packets are then not counted."""
    if not os.uname().release.startswith("6.1."):
        if not getattr(rxe_pkt_probe, "told", False):
            rxe_pkt_probe.told = True
            log(f"--trace-rxe: kernel {os.uname().release}: the rxe_pkt probe's offsets are "
                "6.1's; packets by opcode not counted")
        return False
    with open(f"{TRACEFS}/kprobe_events") as f:
        if "ulp/rxe_pkt" in f.read():
            return True
    # Appended without a seek, which tracefs refuses (Python's "a" mode seeks).
    fd = os.open(f"{TRACEFS}/kprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (RXE_PKT_PROBE + "\n").encode())
    finally:
        os.close(fd)
    return True


def rxe_trace_start():
    """The function tracer on RXE_FUNCS only, its buffer emptied (in the guest)."""
    if not os.path.exists(f"{TRACEFS}/tracing_on"):
        sh(["mount", "-t", "tracefs", "nodev", TRACEFS])
    write(f"{TRACEFS}/tracing_on", "0")
    write(f"{TRACEFS}/current_tracer", "nop")
    write(f"{TRACEFS}/buffer_size_kb", "65536")
    write(f"{TRACEFS}/set_ftrace_filter", " ".join(RXE_FUNCS))
    if rxe_pkt_probe():
        write(f"{TRACEFS}/events/ulp/rxe_pkt/enable", "1")
    write(f"{TRACEFS}/current_tracer", "function")
    write(f"{TRACEFS}/trace", "")
    write(f"{TRACEFS}/tracing_on", "1")


def rxe_trace_stop(ios):
    """The tracer off; calls per I/O of each function, and of each (function, thread group)
    as "function@group"; Fail when the buffer lost events (the counts would be low). A job
    that fails leaves the tracer on: every job of a --trace-rxe run is traced, and the
    next one's rxe_trace_start begins afresh."""
    write(f"{TRACEFS}/tracing_on", "0")
    calls, seen = {}, set()
    with open(f"{TRACEFS}/trace") as f:
        for line in f:
            if line.startswith("#"):
                m = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", line)
                if m and m.group(1) != m.group(2):
                    raise Fail(f"--trace-rxe: the trace buffer lost events "
                               f"({m.group(1)} of {m.group(2)} kept)")
                continue
            m = re.match(r"\s*(.+?)-\d+\s+\[\d+\]\s+\S+\s+[\d.]+:\s+(\S+)", line)
            if m and m.group(2) == "rxe_pkt:":
                for k in rxe_pkt_keys(line, seen):
                    calls[k] = calls.get(k, 0) + 1
            elif m:
                for k in (m.group(2), f"{m.group(2)}@{thread_group(m.group(1))}"):
                    calls[k] = calls.get(k, 0) + 1
    if os.path.exists(f"{TRACEFS}/events/ulp/rxe_pkt/enable"):
        write(f"{TRACEFS}/events/ulp/rxe_pkt/enable", "0")
    write(f"{TRACEFS}/current_tracer", "nop")
    return {k: v / ios for k, v in calls.items()}


def rxe_pkt_keys(line, seen):
    """The counters one rxe_pkt event adds to: "pkt:OPCODE" (a READ request with its
    length: "pkt:READ_REQUEST 65536"; a NAK with its AETH syndrome: "pkt:NAK 0x60",
    "pkt:RNR_NAK 0x2c"), and
    "resend:OPCODE" when the sending QP sent that PSN with that opcode before in this job
    (a retry after a NAK, an RNR NAK or a timeout). seen: the (qpn, opcode, psn) so far."""
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    qpn, op, psn = int(f["qpn"]), int(f["op"]), int(f["psn"])
    name = RC_OPCODES.get(op, f"opcode {op}")
    if op == 12:  # RETH's DMA length, big-endian
        name += f" {int.from_bytes(int(f['rlen'], 0).to_bytes(4, 'little'), 'big')}"
    elif op == 17 and int(f["syn"], 0) >> 5 != 0:  # AETH: 0 ACK, 1 RNR NAK, 3 NAK
        syn = int(f["syn"], 0)
        name = f"{'RNR_NAK' if syn >> 5 == 1 else 'NAK'} {syn:#04x}"
    keys = [f"pkt:{name}"]
    if op != 17:  # an ACK repeats the PSN it acknowledges
        if (qpn, op, psn) in seen:
            keys.append(f"resend:{name}")
        seen.add((qpn, op, psn))
    return keys


def run_job(dev, job, runtime, size, pid, out_json, trace_rxe=False):
    name, rw, bs, qd = job
    cmd = ["fio", "--output-format=json", f"--output={out_json}", "--name=job",
           f"--filename={dev}", "--ioengine=libaio", "--direct=1", f"--rw={rw}",
           f"--bs={bs}", f"--iodepth={qd}", f"--size={size}", "--time_based",
           f"--runtime={runtime}", "--randrepeat=0", "--norandommap"]
    t0 = proc_cpu(pid) if pid else 0.0
    s0 = proc_switches(pid) if pid else {}
    g0, c0, a0 = guest_busy(), guest_switches(), thread_switches()
    q0 = disk_requests(dev)
    if trace_rxe:
        rxe_trace_start()
    sh(cmd, timeout=runtime + 90)
    g1, c1, a1 = guest_busy(), guest_switches(), thread_switches()
    q1 = disk_requests(dev)
    t1 = proc_cpu(pid) if pid else 0.0
    s1 = proc_switches(pid) if pid else {}
    with open(out_json) as f:
        j = json.load(f)["jobs"][0]
    d = j["read"] if rw in ("randread", "read") else j["write"]
    ios = d["total_ios"]
    if ios == 0 or j["error"] != 0:
        raise Fail(f"fio {name} on {dev}: {ios} I/Os, error {j['error']}")
    rxe = rxe_trace_stop(ios) if trace_rxe else {}
    pct = d["clat_ns"].get("percentile", {})
    return {
        "iops": d["iops"],
        "mbps": d["bw_bytes"] / 1e6,
        "p50_us": pct.get("50.000000", 0) / 1e3,
        "p99_us": pct.get("99.000000", 0) / 1e3,
        "guest_us_per_io": (g1 - g0) * 1e6 / ios,
        "target_us_per_io": (t1 - t0) * 1e6 / ios if pid else None,
        "reqs_per_io": (q1 - q0) / ios,
        "guest_cs_per_io": (c1 - c0) / ios,
        "target_cs_per_io": switches_since(s0, s1) / ios if pid else None,
        "cs_per_io_by_thread": switches_by_group(a0, a1, ios),
        "ics_per_io_by_thread": switches_by_group(a0, a1, ios, 2),
        "cpu_us_per_io_by_thread": {k: v * 1e6 / CLK_TCK for k, v in
                                    switches_by_group(a0, a1, ios, 3).items()},
        "sys_us_per_io_by_thread": {k: v * 1e6 / CLK_TCK for k, v in
                                    switches_by_group(a0, a1, ios, 4).items()},
        "rxe_calls_per_io": rxe,
        "ios": ios,
    }


def rotated(targets, k):
    """Round k's order (0-based): the targets' list turned left k times (A B C, B C A, ...)."""
    k %= max(len(targets), 1)
    return targets[k:] + targets[:k]


def run_targets(targets, initiator, args, size, title, lun_desc, settle=None):
    """In the guest, args.rounds times with the order rotated: for each target, settle()
    (when given), start it, log in, run the jobs, log out, stop it; a target that fails is
    reported and the next one runs. Prints the table; writes every round's fio JSON and
    results.json to args.out. 0 when every target ran every job of every round, 1
    otherwise."""
    results = {}  # (job name, target name) -> [figures of each round that ran it]
    failed = []
    orders = []
    for k in range(args.rounds):
        order = rotated(targets, k)
        orders.append([t.name for t in order])
        log(f"round {k + 1} of {args.rounds}: {' '.join(orders[-1])}")
        for t in order:
            t.round = k + 1
            try:
                if settle:
                    settle()
                pid = t.start()
                dev = initiator.login(t)
                q = f"/sys/block/{os.path.basename(dev)}/queue"
                log(f"{t.name}: logged in, LUN {t.lun} is {dev} (max_segments "
                    f"{open(q + '/max_segments').read().strip()}, max_sectors_kb "
                    f"{open(q + '/max_sectors_kb').read().strip()})")
                for job in JOBS:
                    r = run_job(dev, job, args.runtime, size, pid,
                                os.path.join(args.out, f"fio-r{k + 1}-{t.name}-{job[1]}-"
                                             f"{job[2]}.json"), args.trace_rxe)
                    r["round"] = k + 1
                    results.setdefault((job[0], t.name), []).append(r)
                    log(f"round {k + 1}: {t.name}: {job[0]}: {r['iops']:.0f} IOPS, "
                        f"{r['mbps']:.1f} MB/s")
                initiator.logout()
                t.stop()
            except (Fail, OSError) as e:  # OSError: a sysfs or configfs write refused
                log(f"FAIL: round {k + 1}: {t.name}: {e}")
                failed.append(f"{t.name} (round {k + 1})")
                initiator.cleanup()
                try:
                    t.stop()
                except Exception as e2:  # already broken: say so, go on with the next
                    log(f"{t.name}: stop: {e2}")
    print_table(results, [t.name for t in targets], orders, args, title, lun_desc)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump([{"job": k[0], "target": k[1], **r} for k, rs in results.items()
                   for r in rs], f, indent=1)
    if failed:
        log(f"targets that did not complete: {', '.join(failed)}")
        return 1
    return 0


# The table's columns: heading, key in run_job's figures, format.
COLUMNS = [("IOPS", "iops", ".0f"), ("MB/s", "mbps", ".2f"), ("p50 us", "p50_us", ".0f"),
           ("p99 us", "p99_us", ".0f"), ("cmds/IO", "reqs_per_io", ".2f"),
           ("guest us/IO", "guest_us_per_io", ".1f"),
           ("tgt us/IO", "target_us_per_io", ".1f"), ("guest cs/IO", "guest_cs_per_io", ".2f"),
           ("tgt cs/IO", "target_cs_per_io", ".2f")]
BY_THREAD = ["cs_per_io_by_thread", "ics_per_io_by_thread", "cpu_us_per_io_by_thread",
             "sys_us_per_io_by_thread", "rxe_calls_per_io"]


def summarize(rounds):
    """One row from the rounds of a job on a target: each figure's median, min and max
    (None for a figure the target has not: a kernel target's own CPU); the per-thread
    figures the median of each thread group's (0 in a round it did not show)."""
    row = {}
    for _, key, _ in COLUMNS:
        vals = [r[key] for r in rounds]
        row[key] = None if None in vals else (median(vals), min(vals), max(vals))
    for key in BY_THREAD:
        groups = {g for r in rounds for g in r[key]}
        m = {g: median([r[key].get(g, 0) for r in rounds]) for g in groups}
        row[key] = dict(sorted(m.items(), key=lambda kv: -kv[1]))
    return row


def header(args, title, lun_desc):
    """The run's identity, to quote with any figure of it."""
    ch = getattr(args, "ch_count", None)
    lines = [f"{title} (fio, libaio, O_DIRECT) on rxe0 in the VM",
             f"  command:  {args.cmdline or '(in the guest only)'}",
             f"  backing:  {args.backing}: {lun_desc}",
             f"  rounds:   {args.rounds}"
             + (" (the targets' order rotated each round)" if args.rounds > 1 else "")
             + f", {args.runtime} s per job",
             "  ch_count: " + (("ib_srp's default" if not ch else str(ch))
                               if ch is not None else "- (iSER: one connection per session)")]
    return "\n".join(lines)


def print_table(results, order, orders, args, title, lun_desc):
    rows = {k: summarize(v) for k, v in results.items()}
    many = args.rounds > 1
    print()
    print(header(args, title, lun_desc))
    print("  figures:  " + ("the median of the rounds, their min-max on the line below "
                            "(the median of 2 is their mean); " if many else "")
          + "they compare targets within this run only")
    # Each column as wide as its widest cell (a min-max span is twice a figure).
    lines = []  # (job cell, target cell, [figure cells])
    for job in JOBS:
        first = True
        for t in order:
            r = rows.get((job[0], t))
            if not r:
                continue
            cells, spans = [], []
            for _, key, fmt in COLUMNS:
                v = r[key]
                cells.append(format(v[0], fmt) if v else "-")
                spans.append(format(v[1], fmt) + "-" + format(v[2], fmt) if v else "")
            lines.append((job[0] if first else "", t, cells))
            if many:
                lines.append(("", "  min-max", spans))
            first = False
    widths = [max([len(h)] + [len(c[i]) for _, _, c in lines])
              for i, (h, _, _) in enumerate(COLUMNS)]
    hdr = f"{'job':<18} {'target':<12} " + "  ".join(
        f"{h:>{w}}" for (h, _, _), w in zip(COLUMNS, widths))
    print(hdr)
    print("-" * len(hdr))
    for j, t, cells in lines:
        print(f"{j:<18} {t:<12} " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    print()
    print("IOPS of each round (orders: " + "; ".join(
        f"{k + 1}: {' '.join(o)}" for k, o in enumerate(orders)) + "):")
    for job in JOBS:
        for t in order:
            rs = results.get((job[0], t))
            if rs:
                print(f"  {job[0]:<18} {t:<12} " + "  ".join(
                    f"r{r['round']} {r['iops']:>8.0f}" for r in rs))
    print()
    what = " (medians of the rounds)" if many else ""
    by_thread(rows, order, "context switches per I/O by guest thread" + what + " (the "
              "largest five, the involuntary ones in brackets; a switch in and out of the "
              "CPU idle loop counts in swapper's, which /proc does not list):",
              "cs_per_io_by_thread", "ics_per_io_by_thread", ".2f")
    by_thread(rows, order, "CPU per I/O by guest thread, us" + what + " (the largest five; "
              "in the kernel in brackets):", "cpu_us_per_io_by_thread",
              "sys_us_per_io_by_thread", ".1f")
    if args.trace_rxe:
        rxe_table(rows, order, what)
    print("ratios ulp-targetd / other" + (", of the medians" if many else "") +
          " (IOPS > 1 is faster; p50, p99 and guest CPU per I/O < 1 are better):")
    for job in JOBS:
        u = rows.get((job[0], "ulp-targetd"))
        for t in order:
            o = rows.get((job[0], t))
            if t == "ulp-targetd" or not u or not o:
                continue
            print(f"  {job[0]:<18} vs {t:<5}  IOPS {u['iops'][0] / o['iops'][0]:.2f}x  "
                  f"p50 {u['p50_us'][0] / max(o['p50_us'][0], 1e-9):.2f}x  "
                  f"p99 {u['p99_us'][0] / max(o['p99_us'][0], 1e-9):.2f}x  "
                  f"guest CPU/IO {u['guest_us_per_io'][0] / o['guest_us_per_io'][0]:.2f}x")


def rxe_table(rows, order, what):
    """--trace-rxe: each function's calls per I/O, the two thread groups that made most of
    them in brackets."""
    print("rxe's work per I/O, calls of its functions" + what + " (--trace-rxe: the two "
          "threads that made most in brackets; the tracer slows every target, so compare "
          "these runs only with each other):")
    for job in JOBS:
        for t in order:
            r = rows.get((job[0], t))
            if not r or not r.get("rxe_calls_per_io"):
                continue
            c = r["rxe_calls_per_io"]
            print(f"  {job[0]:<18} {t}")
            for fn in RXE_FUNCS:
                by = sorted(((k.split("@", 1)[1], v) for k, v in c.items()
                             if k.startswith(fn + "@")), key=lambda kv: -kv[1])[:2]
                print(f"      {fn:<20} {c.get(fn, 0):7.2f}  (" +
                      ", ".join(f"{g} {v:.2f}" for g, v in by) + ")")
            # Packets by opcode, and the resent ones (rxe_pkt_keys).
            for kind in ("pkt", "resend"):
                for k, v in sorted((k, v) for k, v in c.items() if k.startswith(kind + ":")):
                    print(f"      {kind} {k.split(':', 1)[1]:<28} {v:7.2f}")
    print()


def by_thread(rows, order, title, key, part_key, fmt):
    """Print a per-thread figure of every job and target: the largest five groups, each
    with the part part_key gives in brackets."""
    print(title)
    for job in JOBS:
        for t in order:
            r = rows.get((job[0], t))
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
    # --trace-rxe: reading back and counting a job's trace in the guest took about 100 s
    # under TCG (128 KiB jobs on SRP, 10 s each).
    per_job_s = args.runtime + 20 + (120 if args.trace_rxe else 0)
    timeout = args.timeout or (
        300 + args.rounds * len(targets) * (len(JOBS) * per_job_s + per_target_extra_s))
    log(f"{args.cmdline}: backing {args.backing}, {args.rounds} round(s), "
        f"{args.runtime} s per job, VM timeout {timeout} s")
    cmd = [os.path.join(ROOT, "tools/vm/run"), "--timeout", str(timeout), "--share", out,
           "--", sys.executable, os.path.abspath(script), "--in-guest",
           "--runtime", str(args.runtime), "--targetd", os.path.abspath(args.targetd),
           "--out", "/run/ulp-vm", "--only", ",".join(targets), "--backing", args.backing,
           "--rounds", str(args.rounds), f"--cmdline={args.cmdline}"]
    if args.quick:
        cmd.append("--quick")
    if args.targetd_args:
        cmd.append(f"--targetd-args={args.targetd_args}")
    if args.trace_rxe:
        cmd.append("--trace-rxe")
    if args.jobs is not None:
        cmd.append(f"--jobs={args.jobs}")
    cmd += getattr(args, "guest_extra", [])
    rc = subprocess.call(cmd)
    if keep:
        print(f"{TAG}: raw results in {out}")
    else:
        shutil.rmtree(out, ignore_errors=True)
    return rc


def add_common_args(ap, targets, backings):
    """The options both scripts take; backings: the --backing choices, the default first."""
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
    ap.add_argument("--jobs", default=None,
                    help="comma-separated jobs by fio rw-bs: randread-4k, randwrite-4k, "
                         "read-128k, write-128k (the default: these four), and read-1m, "
                         "write-1m (only when named)")
    ap.add_argument("--backing", choices=backings, default=backings[0])
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the whole set of targets N times in the one VM boot, the "
                         "order rotated each round; the table gives medians (default 1)")
    ap.add_argument("--trace-rxe", action="store_true",
                    help="count rxe's work per I/O (packets, payload copies, QP task runs, "
                         "CQEs, tasklets, uverbs calls) by thread, with ftrace's function "
                         "tracer in the guest; it slows every target, so compare runs made "
                         "with it only with each other")
    ap.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cmdline", default="", help=argparse.SUPPRESS)  # the host's, quoted


def check_common_args(ap, args, targets):
    args.only = [t for t in args.only.split(",") if t]
    for t in args.only:
        if t not in targets:
            ap.error(f"--only: unknown target {t!r} ({', '.join(targets)})")
    if args.jobs is not None:
        names = {f"{j[1]}-{j[2]}": j for j in JOBS + EXTRA_JOBS}
        want = [n for n in args.jobs.split(",") if n]
        if not want:
            ap.error("--jobs: no job named")
        for n in want:
            if n not in names:
                ap.error(f"--jobs: unknown job {n!r} ({', '.join(names)})")
        JOBS[:] = [j for n, j in names.items() if n in want]  # in the table's order
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    if args.runtime is None:
        args.runtime = 3 if args.quick else 10
    if not args.in_guest:
        args.cmdline = shlex.join(sys.argv)
        if not os.access(args.targetd, os.X_OK):
            ap.error(f"{args.targetd} is not built")
