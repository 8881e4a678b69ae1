"""What the CPU offers, where a choice of layout or kernel depends on it."""

import functools
import platform


def lacks_avx512(cpuinfo_text):
    """True for the `/proc/cpuinfo` text of an x86 CPU whose flags have no avx512f."""
    flags = [line.split(":", 1)[1].split() for line in cpuinfo_text.splitlines()
             if line.startswith("flags")]
    return bool(flags) and "avx512f" not in flags[0]


@functools.cache
def is_x86_without_avx512():
    """True on an x86-64 Linux machine without AVX-512 (e.g. AVX2 EPYCs before Zen 4); False
    elsewhere, and where /proc/cpuinfo cannot be read."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return lacks_avx512(f.read())
    except OSError:
        return False
