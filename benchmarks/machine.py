"""What every benchmark prints about the machine it ran on, and a per-call peak-memory probe.

    from machine import machine_line, PeakRSS   # benchmarks/ is the script's directory on sys.path
"""

from __future__ import annotations

import os
import platform
import re

import torch


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_line() -> str:
    """One line: CPU model, the SIMD level torch uses, logical cores, load average, torch version and
    its thread count."""
    try:
        load = "load %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "load n/a"
    try:
        simd = f" ({torch.backends.cpu.get_cpu_capability()})"
    except AttributeError:
        simd = ""
    return (f"machine: {cpu_model()}{simd}; {os.cpu_count()} logical cores; {load}; "
            f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


class PeakRSS:
    """Peak resident memory of the process during a ``with`` block, in MiB above the RSS at its start.

    Resets the kernel's high-water mark (``/proc/self/clear_refs`` = 5, Linux) on entry and reads
    ``VmHWM`` on exit; ``extra_mib`` is NaN where that is unavailable.
    """

    def __enter__(self) -> "PeakRSS":
        self.ok = True
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.start = _status_kb("VmRSS")
        except OSError:
            self.ok = False
        return self

    def __exit__(self, *exc) -> None:
        self.extra_mib = (_status_kb("VmHWM") - self.start) / 1024 if self.ok else float("nan")


if __name__ == "__main__":
    print(machine_line())
