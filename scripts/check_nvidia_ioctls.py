"""Which NVIDIA driver releases rtd's GPU seccomp filter knows: for each release tag of a checkout
of NVIDIA's open-gpu-kernel-modules, every ioctl its headers define must be one the filter's
tables (sandbox/seccomp.py) name, with the same number (an allowed one a release does not define
yet is fine: no other name of its has that number); the releases that pass are written as
policies/nvidia_drivers.toml, the driver gate's known-good list (sandbox/gpu.py).

    python scripts/check_nvidia_ioctls.py CHECKOUT [--since 535] [--write]

A release whose headers add an ioctl, or renumber one, is left out and printed with the reason:
review the new call (allow, learn or forbid it in seccomp.py), then run this again. The
closed-source kernel module of the same version shares these headers' numbers."""
import argparse
import pathlib
import re
import subprocess
import sys

from rtd.sandbox import seccomp

HEADERS = {   # where each family's numbers are defined (the first path a release has)
    "nv": ["kernel-open/common/inc/nv-ioctl-numbers.h", "src/nvidia/arch/nvalloc/unix/include/nv-ioctl-numbers.h"],
    "numa": ["kernel-open/common/inc/nv-ioctl-numa.h", "src/nvidia/arch/nvalloc/unix/include/nv-ioctl-numa.h"],
    "rm": ["src/nvidia/arch/nvalloc/unix/include/nv_escape.h"],
    "uvm": ["kernel-open/nvidia-uvm/uvm_ioctl.h"],
    "uvm_linux": ["kernel-open/nvidia-uvm/uvm_linux_ioctl.h"],
}
OUT = pathlib.Path(__file__).resolve().parent.parent / "policies" / "nvidia_drivers.toml"


def _show(checkout: str, tag: str, paths: list[str]) -> str:
    for path in paths:
        done = subprocess.run(["git", "-C", checkout, "show", f"{tag}:{path}"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout
    return ""


def defined(checkout: str, tag: str) -> dict[str, int]:
    """NV_ESC_* and UVM_* ioctl names -> numbers, as this release's headers define them."""
    found = {}
    nv = _show(checkout, tag, HEADERS["nv"]) + _show(checkout, tag, HEADERS["numa"])
    base = re.search(r"#define\s+NV_IOCTL_BASE\s+(\d+)", nv)
    for name, k in re.findall(r"#define\s+(NV_ESC_\w+)\s+\(NV_IOCTL_BASE\s*\+\s*(\d+)\)", nv):
        found[name] = int(base.group(1)) + int(k)
    for name, value in re.findall(r"#define\s+(NV_ESC_RM_\w+)\s+(0x[0-9A-Fa-f]+)", _show(checkout, tag, HEADERS["rm"])):
        found[name] = int(value, 16)
    uvm = _show(checkout, tag, HEADERS["uvm"])
    for name, k in re.findall(r"#define\s+(UVM_\w+)\s+UVM_IOCTL_BASE\((\d+)\)", uvm):
        found[name] = int(k)
    for name, value in re.findall(r"#define\s+(UVM_\w+)\s+(0x[0-9A-Fa-f]+)", _show(checkout, tag, HEADERS["uvm_linux"])):
        found[name] = int(value, 16)
    return found


def verdict(found: dict[str, int]) -> str | None:
    """None when the filter's tables name every ioctl of the release with its number; else why not."""
    known = {**seccomp.NVIDIA_IOCTLS, **seccomp.NVIDIA_UNLISTED, **seccomp.UVM_IOCTLS, **seccomp.UVM_UNLISTED}
    if not any(n.startswith("NV_ESC_") for n in found) or not any(n.startswith("UVM_") for n in found):
        return "headers not found"
    for name in list(seccomp.NVIDIA_IOCTLS) + list(seccomp.UVM_IOCTLS):   # allowed: absent (older), or this number
        if name in found and found[name] != known[name]:
            return f"{name} is {found[name]} here, {known[name]} in the filter"
    for name, number in sorted(found.items()):
        if name not in known:
            return f"{name} ({number}) is unknown to the filter"
        if known[name] != number:
            return f"{name} is {number} here, {known[name]} in the filter"
    return None


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("checkout")
    args.add_argument("--since", type=int, default=535, help="the oldest driver branch to check")
    args.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(OUT.parent.parent)}")
    opts = args.parse_args()
    tags = subprocess.run(["git", "-C", opts.checkout, "tag"], capture_output=True, text=True, check=True).stdout.split()
    tags = sorted((t for t in tags if re.fullmatch(r"\d+\.\d+(\.\d+)?", t) and int(t.split(".")[0]) >= opts.since),
                  key=lambda t: tuple(int(p) for p in t.split(".")))
    commit = subprocess.run(["git", "-C", opts.checkout, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    good = []
    for tag in tags:
        why = verdict(defined(opts.checkout, tag))
        print(f"{tag}: {'known' if why is None else 'left out: ' + why}")
        if why is None:
            good.append(tag)
    if opts.write:
        lines = ["# The NVIDIA driver releases whose ioctl numbers rtd's GPU seccomp filter was checked against:",
                 "# every ioctl their open-gpu-kernel-modules headers define is named in sandbox/seccomp.py's tables",
                 "# with the same number. Written by scripts/check_nvidia_ioctls.py from NVIDIA/open-gpu-kernel-modules",
                 f"# at {commit[:12]}. A driver not listed is refused for GPU tenants unless their policy sets",
                 "# unsafe_gpu_audit. Checked against headers, not run: bench/gpu_check.sh runs CUDA under the filter.",
                 "versions = ["]
        lines += [f'  "{t}",' for t in good] + ["]", ""]
        OUT.write_text("\n".join(lines))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
