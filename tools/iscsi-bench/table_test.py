#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/iscsi-bench/table_test.py - the run's table from made-up repetitions: each row's
median with the min-max of its repetitions below it, each ratio's value per round, the
note that names the paths whose repetitions differ by more than MODE_GAP, and the
per-thread figures' medians. No target runs:
the figures are given, the table is what is checked."""

import importlib.machinery
import importlib.util
import io
import os
import sys
import unittest

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))


def load_run():
    loader = importlib.machinery.SourceFileLoader("iscsi_bench_run", os.path.join(HERE, "run"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


run = load_run()
JOB = run.JOBS[1]  # randwrite 4k qd32
SRP, TCP = ("ulp-initiator", "srp", "ulp-targetd"), ("ulp-initiator", "tcp", "ulp-targetd")


def sample(iops, cpu=10.0):
    return {"iops": iops, "mb_per_s": iops * 4096 / 1e6, "p50_us": 1e6 * 32 / iops,
            "p99_us": 3e6 * 32 / iops, "target_cpu_us_per_io": cpu,
            "client_cpu_us_per_io": cpu / 2, "ios": iops * 5, "seconds": 5.0,
            "target_cpu_s": cpu * iops * 5 / 1e6, "client_cpu_s": cpu * iops * 5 / 2e6,
            "threads": {"cpu_us_per_io": {"ulp-cq-poll": cpu * 0.6, "iou-wrk": cpu * 0.4},
                        "cs_per_io": {"ulp-cq-poll": 0.5, "iou-wrk": 1.0},
                        "ics_per_io": {"ulp-cq-poll": 0.25}}}


def table(rows, repeat):
    meta = {"mode": "default", "runtime_s": 5.0, "repeat": repeat, "lun": "file x",
            "backing": "file", "lun_mib": 1024, "loadavg_start": [0.1, 0.1, 0.1],
            "loadavg_end": [0.2, 0.1, 0.1], "noisy": False, "idle_cpu_pct": {}}
    out = io.StringIO()
    run.print_table({"meta": meta, "runs": rows, "ratios": run.make_ratios(rows)}, out)
    return out.getvalue()


class Spread(unittest.TestCase):
    def test_rows_and_ratios_show_their_repetitions(self):
        srp = run.make_row(JOB, SRP, [sample(76000, 18), sample(130000, 9), sample(77000, 17)])
        tcp = run.make_row(JOB, TCP, [sample(114000), sample(115000), sample(94000)])
        self.assertEqual(srp["iops"], 77000)  # the median
        self.assertEqual((srp["iops_min"], srp["iops_max"]), (76000, 130000))
        self.assertEqual((srp["target_cpu_us_per_io_min"],
                          srp["target_cpu_us_per_io_max"]), (9, 18))
        ratios = run.make_ratios([srp, tcp])
        self.assertEqual([round(x, 2) for x in ratios[0]["iops_rounds"]], [0.67, 1.13, 0.82])
        text = table([srp, tcp], 3)
        self.assertIn("min-max: IOPS 76000-130000", text)
        self.assertIn("min-max: IOPS 94000-115000", text)
        self.assertIn("0.67 1.13 0.82", text)
        # SRP's repetitions differ by 1.71x: named as modes of the host; TCP's by 1.22x: not.
        note = text[text.index("NOTE: these paths' repetitions"):]
        self.assertIn("over srp to ulp-targetd: 76000, 130000, 77000 IOPS", note)
        self.assertNotIn("over tcp", note)

    def test_threads_by_group(self):
        # Each group's median over the rounds, largest CPU first; a group missing from a
        # round counts 0 there.
        a, b, c = sample(100000, 10), sample(100000, 20), sample(100000, 30)
        c["threads"]["cpu_us_per_io"]["ksoftirqd"] = 50.0
        row = run.make_row(JOB, SRP, [a, b, c])
        th = row["threads"]
        self.assertEqual(list(th["cpu_us_per_io"]), ["ulp-cq-poll", "iou-wrk", "ksoftirqd"])
        self.assertAlmostEqual(th["cpu_us_per_io"]["ulp-cq-poll"], 12.0)
        self.assertEqual(th["cpu_us_per_io"]["ksoftirqd"], 0)
        self.assertEqual(th["ics_per_io"]["iou-wrk"], 0)
        text = table([row], 3)
        self.assertIn("srp   ulp-targetd  ulp-cq-poll 12.0 (0.50, 0.25)  iou-wrk 8.0 (1.00, "
                      "0.00)", text)

    def test_one_run_has_no_spread(self):
        srp = run.make_row(JOB, SRP, [sample(76000)])
        tcp = run.make_row(JOB, TCP, [sample(114000)])
        self.assertNotIn("iops_min", srp)
        self.assertIsNone(run.make_ratios([srp, tcp])[0]["iops_rounds"])
        text = table([srp, tcp], 1)
        self.assertNotIn("min-max", text)
        self.assertNotIn("NOTE: these paths", text)

    def test_steady_repetitions_raise_no_note(self):
        rows = [run.make_row(JOB, SRP, [sample(100000), sample(110000), sample(124000)]),
                run.make_row(JOB, TCP, [sample(100000), sample(101000), sample(99000)])]
        self.assertNotIn("NOTE: these paths", table(rows, 3))


if __name__ == "__main__":
    unittest.main()
