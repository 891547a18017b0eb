#!/usr/bin/env python3
"""Derive the driver fault families from the drivers' own sources (a maintainer's tool).

The catalog's source-derived families (``controller/fleetmedic/data/driver_families.yaml``)
list, per family, every error message the driver prints on that family's error path: the
source file, the function that prints it, the print level and the format string. This
script walks a git checkout of the driver and prints that YAML; the data file is its
output, committed with the release it was read from. No driver code is copied: only the
format strings (what the driver writes into the kernel log) and where they are printed.

Usage::

    python scripts/derive_families.py nvidia GIT_DIR REF REPO > source_nvidia.yaml
    python scripts/derive_families.py amdgpu GIT_DIR REF REPO > source_amdgpu.yaml
    python scripts/derive_families.py nvswitch GIT_DIR REF REPO > source_nvswitch.yaml

(the three files in ``controller/fleetmedic/data``: ``REPO`` is the repository's name,
written into the file with the commit, e.g. ``NVIDIA/open-gpu-kernel-modules``).

``GIT_DIR`` is a bare or normal git directory (a fetched snapshot of
NVIDIA/open-gpu-kernel-modules, or of a Linux tree with drivers/gpu/drm/amd); ``REF``
defaults to ``HEAD``. The family definitions (which files and functions make a family,
and which error path it is) are :data:`NVIDIA` and :data:`AMDGPU` below.

Why by function: the NVIDIA driver prefixes every line with the printing function
(``NVRM: kfspPollForQueueEmpty_IMPL: ...``), so the function is in the log line itself;
amdgpu's ``dev_err`` lines carry no function, so for amdgpu the format alone is matched.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import subprocess
import sys
from collections.abc import Iterator

# A function definition's name: NVIDIA style puts it alone at column 0 (return type on the
# line before, arguments on the next), Linux style has ``type name(args)`` on one line.
_DEF = re.compile(
    r"^(?:(?:static|inline|__maybe_unused|NV_STATUS|NvBool|NvU32|void|int|bool|u32|long|"
    r"ssize_t|struct\s+\w+\s*\*?|enum\s+\w+|const|unsigned|uint32_t|uint64_t)\s+\**)*"
    r"\**(?P<name>[A-Za-z_]\w*)\s*(?:\(|$)"
)
_KEYWORDS = {"if", "for", "while", "switch", "return", "else", "do", "case", "sizeof", "defined"}
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_MACROS = {"NvU64_fmtx": "llx", "NvU64_fmtX": "llX", "NvU64_fmtu": "llu", "NvU64_fmtd": "lld"}


@dataclasses.dataclass(frozen=True)
class Family:
    """Which prints make a family: files (globs), functions (regex), print macros and levels."""

    name: str
    path: str  # the error path: boot, firmware-load, rpc, runtime
    files: tuple[str, ...]
    functions: str = r".*"
    levels: tuple[str, ...] = ("LEVEL_ERROR", "ERROR", "WARNING")
    formats: str = r".*"  # only formats matching this (by meaning, e.g. a failure word)
    excluded: str = r"(?!)"  # formats that are not faults (user input, optional features)


@dataclasses.dataclass(frozen=True)
class Print:
    file: str
    function: str
    macro: str
    level: str
    format: str


NVIDIA_MACROS = ("NV_PRINTF", "NV_PRINTF_COND", "NV_ERROR_LOG_DATA")
_NV_FAIL = (
    r"(?i)fail|error|timed? ?out|timeout|unable|cannot|can't|could not|not (?:ready|"
    r"respond|complete)|mismatch|invalid|bad|unexpected|exceeded|fatal|halt|hang|corrupt|"
    r"lost|unsupported image|abort|refused|missing"
)
_NV_NOT_FAULTS = (
    r"(?i)non-fatal|retrying|is disabled using the regkey|skipping|will be printed|"
    r"error injection|by regkey|not supported on this"
)
NVIDIA = (
    Family(
        "gsp-boot",
        "boot",
        ("src/nvidia/src/kernel/gpu/gsp/*.c", "src/nvidia/src/kernel/gpu/gsp/arch/*/*.c"),
        r"(?i).*(boot|fmc|booter|wpr|fwsec|scrub|rminitdone|waitforgsp|initrm|lockdown|"
        r"prepareforbootstrap|executesequencer|resetgsp|sr(?:init|resume)|gspinitrm|"
        r"reset|teardown|unload|wait).*",
        formats=_NV_FAIL,
        excluded=_NV_NOT_FAULTS,
    ),
    Family(
        "gsp-firmware-load",
        "firmware-load",
        (
            "src/nvidia/src/kernel/gpu/gsp/*.c",
            "src/nvidia/src/kernel/gpu/gsp/arch/*/*.c",
            "src/nvidia/arch/nvalloc/unix/src/osinit.c",
        ),
        r"(?i).*(image|ucode|firmware|binary|radix|elf|signature|libosinit|fetchgsp|"
        r"loadgsp|setuplibos|createradix|allocbootarg).*",
        formats=_NV_FAIL,
        excluded=_NV_NOT_FAULTS,
    ),
    Family(
        "fsp",
        "boot",
        ("src/nvidia/src/kernel/gpu/fsp/*.c", "src/nvidia/src/kernel/gpu/fsp/arch/*/*.c"),
        formats=_NV_FAIL,
        excluded=_NV_NOT_FAULTS,
    ),
    Family(
        "gfw-boot",
        "boot",
        ("src/nvidia/src/kernel/gpu/**.c",),
        r"(?i).*gfwboot.*",
        formats=_NV_FAIL,
        excluded=_NV_NOT_FAULTS,
    ),
    Family(
        "gsp-rpc",
        "rpc",
        (
            "src/nvidia/src/kernel/vgpu/rpc.c",
            "src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c",
            "src/nvidia/src/kernel/gpu/gsp/message_queue_cpu.c",
        ),
        r"(?i).*(rpc|_issueRpc|recvpoll|messagequeue|msgq|kgspRpc|_kgspLogRpc|gspRmApi|"
        r"rpcRmApi).*",
        formats=_NV_FAIL,
        excluded=_NV_NOT_FAULTS,
    ),
)

LINUX_MACROS = (
    "dev_info",
    "dev_err",
    "dev_err_ratelimited",
    "dev_warn",
    "dev_warn_ratelimited",
    "DRM_ERROR",
    "DRM_DEV_ERROR",
    "drm_err",
    "drm_err_ratelimited",
    "pr_err",
    "pr_err_ratelimited",
    "DRM_WARN",
    "drm_warn",
)
_AMD_NOT_FAULTS = (
    r"(?i)invalid (?:parameter|input|argument|sclk|mclk|vddc|clock|value|index|od)|"
    r"valid .* range|not supported|unsupported|user|od_|overdrive|fan|profile|"
    r"injection|inject|debugfs|sysfs|\bWARN: |already"
)
_AMD_FAIL = (
    r"(?i)fail|error|timed? ?out|timeout|unable|cannot|can't|could not|not done|no response|"
    r"hung|hang|unrecoverable|fatal|invalid|mismatch|lost|exceed|abort|not supported"
)
AMDGPU = (
    Family(
        "ras-aca",
        "runtime",
        (
            "drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c",
            "drivers/gpu/drm/amd/amdgpu/amdgpu_ras_eeprom.c",
            "drivers/gpu/drm/amd/amdgpu/amdgpu_aca.c",
            "drivers/gpu/drm/amd/amdgpu/amdgpu_mca.c",
            "drivers/gpu/drm/amd/amdgpu/amdgpu_umc.c",
        ),
        levels=("ERROR", "WARNING", "INFO"),
        formats=r"(?i)uncorrectable|poison|bad page|exceed|RAS records|fatal|"
        r"hardware error|errors? detected|ras.*(fail|error)",
        excluded=_AMD_NOT_FAULTS + r"|\b0 |no (?:un)?correctable|Can't find bad pages",
    ),
    Family(
        "smu",
        "runtime",
        (
            "drivers/gpu/drm/amd/pm/swsmu/*.c",
            "drivers/gpu/drm/amd/pm/swsmu/smu1*/*.c",
            "drivers/gpu/drm/amd/pm/powerplay/smumgr/*.c",
        ),
        r"(?i)(?!.*(?:od_edit|print_clk|fan|profile|power_limit|user)).*"
        r"(send|msg|wait|smc|dpm_feature|features|setup|hw_init|smu_cmn|check_fw|metrics).*",
        formats=_AMD_FAIL,
        excluded=_AMD_NOT_FAULTS,
    ),
    Family(
        "psp",
        "boot",
        (
            "drivers/gpu/drm/amd/amdgpu/amdgpu_psp.c",
            "drivers/gpu/drm/amd/amdgpu/psp_v*.c",
        ),
        r"(?i).*(psp_(hw|sw)_|load|ring|boot|wait|bootloader|tmr|asd|kdb|sos|fw|cmd).*",
        formats=_AMD_FAIL,
        excluded=_AMD_NOT_FAULTS,
    ),
    Family(
        "mes",
        "runtime",
        (
            "drivers/gpu/drm/amd/amdgpu/amdgpu_mes.c",
            "drivers/gpu/drm/amd/amdgpu/mes_v*.c",
            "drivers/gpu/drm/amd/amdkfd/kfd_device_queue_manager.c",
        ),
        r"(?i).*(mes|queue|hws|unmap|remove|suspend|resume|evict|preempt|reset|hang).*",
        formats=_AMD_FAIL,
        excluded=_AMD_NOT_FAULTS,
    ),
    Family(
        "vmid-pasid",
        "runtime",
        (
            "drivers/gpu/drm/amd/amdgpu/amdgpu_ids.c",
            "drivers/gpu/drm/amd/amdgpu/amdgpu_vm.c",
            "drivers/gpu/drm/amd/amdkfd/kfd_device_queue_manager.c",
            "drivers/gpu/drm/amd/amdkfd/kfd_process.c",
            "drivers/gpu/drm/amd/amdkfd/kfd_debug.c",
            "drivers/gpu/drm/amd/amdgpu/gmc_v*.c",
            "drivers/gpu/drm/amd/amdgpu/amdgpu_gmc.c",
        ),
        r"(?i).*(vmid|pasid|wave|reset_wave|process_interrupt|fault).*",
        levels=("ERROR", "WARNING", "INFO"),
        formats=r"(?i)vmid|pasid",
        excluded=_AMD_NOT_FAULTS,
    ),
)


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True
    ).stdout


def files(gitdir: str, ref: str, patterns: tuple[str, ...]) -> list[str]:
    names = git(gitdir, "ls-tree", "-r", "--name-only", ref).splitlines()
    out = []
    for name in names:
        for pattern in patterns:
            if "**" in pattern:
                head, _, tail = pattern.partition("**")
                if name.startswith(head) and fnmatch.fnmatch(name[len(head) :], "*" + tail):
                    out.append(name)
                    break
            elif fnmatch.fnmatch(name, pattern) and name.count("/") == pattern.count("/"):
                out.append(name)
                break
    return sorted(set(out))


def _calls(text: str, macros: tuple[str, ...]) -> Iterator[tuple[int, str, str]]:
    """``(offset, macro, argument text)`` of each call of one of ``macros``."""
    names = "|".join(sorted(macros, key=len, reverse=True))
    for match in re.finditer(rf"\b({names})\s*\(", text):
        depth, i, quoted = 1, match.end(), False
        while i < len(text) and depth:
            ch = text[i]
            if quoted:
                if ch == "\\":
                    i += 1
                elif ch == '"':
                    quoted = False
            elif ch == '"':
                quoted = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            i += 1
        yield match.start(), match.group(1), text[match.end() : i - 1]


def _functions(text: str) -> list[tuple[int, str]]:
    """``(offset of the body's opening brace, name)`` of every function definition."""
    out: list[tuple[int, str]] = []
    candidate = None
    offset = 0
    for line in text.splitlines(keepends=True):
        if line[:1].isalpha() or line[:1] == "_":
            match = _DEF.match(line)
            if match and match.group("name") not in _KEYWORDS:
                candidate = match.group("name")
        if line.startswith("{") and candidate:
            out.append((offset, candidate))
            candidate = None
        elif line.startswith(("}", "#")) or (line.rstrip().endswith(";") and line[:1].isalpha()):
            candidate = None if line.rstrip().endswith(";") else candidate
        offset += len(line)
    return out


def _format(args: str, macro: str) -> tuple[str, str] | None:
    """``(level, format string)`` of one print call's arguments, or None."""
    level = ""
    if macro.startswith("NV_PRINTF"):
        levels = re.findall(r"\bLEVEL_[A-Z]+\b", args.split('"', 1)[0])
        if not levels:
            return None
        level = levels[-1]
    else:
        lowered = macro.lower()
        level = "ERROR" if "err" in lowered else ("WARNING" if "warn" in lowered else "INFO")
    first = args.find('"')
    if first < 0:
        return None
    rest = args[first:]
    pieces = []
    # the format: adjacent string literals and the printf-format macros between them
    for token in re.finditer(r'"((?:[^"\\]|\\.)*)"|([A-Za-z_]\w*)|(\s+)|(.)', rest, re.S):
        if token.group(1) is not None:
            pieces.append(token.group(1))
        elif token.group(2) is not None and token.group(2) in _MACROS:
            pieces.append(_MACROS[token.group(2)])
        elif token.group(3) is not None:
            continue
        else:
            break
    fmt = "".join(pieces).replace("\\n", "").replace('\\"', '"').replace("\\t", " ").strip()
    return (level, fmt) if fmt else None


def prints(gitdir: str, ref: str, path: str, macros: tuple[str, ...]) -> Iterator[Print]:
    text = git(gitdir, "show", f"{ref}:{path}")
    funcs = _functions(text)
    for offset, macro, args in _calls(text, macros):
        parsed = _format(args, macro)
        if parsed is None:
            continue
        owner = ""
        for start, name in funcs:
            if start > offset:
                break
            owner = name
        yield Print(path, owner, macro, parsed[0], parsed[1])


def derive(gitdir: str, ref: str, families: tuple[Family, ...], macros: tuple[str, ...]):
    out: dict[str, list[Print]] = {}
    cache: dict[str, list[Print]] = {}
    for fam in families:
        members = []
        for path in files(gitdir, ref, fam.files):
            found = cache.setdefault(path, list(prints(gitdir, ref, path, macros)))
            for p in found:
                if (
                    p.level in fam.levels
                    and re.fullmatch(fam.functions, p.function or "")
                    and re.search(fam.formats, p.format)
                    and not re.search(fam.excluded, p.format)
                    and len(re.sub(r"%[-+ #0]*\d*(?:\.\d+)?[hlLqjzt]*[a-zA-Z]", "", p.format)) >= 12
                ):
                    members.append(p)
        seen = set()
        unique = []
        for p in members:
            if (p.function, p.format) not in seen:
                seen.add((p.function, p.format))
                unique.append(p)
        out[fam.name] = unique
    return out


_ENUM_LINE = re.compile(r"^\s*NVSWITCH_ERR_(HW_\w+)\s*(?:=\s*(\d+)\s*)?,", re.M)
_REPORTS = {
    "NVSWITCH_REPORT_FATAL": "fatal",
    "NVSWITCH_REPORT_PRI_ERROR_FATAL": "fatal",
    "NVSWITCH_REPORT_NONFATAL": "non-fatal",
    "NVSWITCH_REPORT_NONFATAL_LINK": "non-fatal",
    "NVSWITCH_REPORT_PRI_ERROR_NONFATAL": "non-fatal",
    "NVSWITCH_REPORT_CORRECTABLE": "correctable",
    "NVSWITCH_REPORT_CORRECTABLE_DEVICE_DATA": "correctable",
    "NVSWITCH_REPORT_CORRECTABLE_LINK_DATA": "correctable",
}


def nvswitch_sxids(gitdir: str, ref: str) -> list[tuple[int, str, str]]:
    """``(code, enum name, severity)`` of every hardware SXid the NVSwitch driver defines:
    the codes from interface/ctrl_dev_nvswitch.h, the severity from the report macro that
    prints each (``fatal``, ``non-fatal``, ``correctable``; ``mixed`` when generations
    differ; ``unreported`` when no report macro names it)."""
    header = git(gitdir, "show", f"{ref}:src/common/nvswitch/interface/ctrl_dev_nvswitch.h")
    codes: dict[str, int] = {}
    value = -1
    for match in _ENUM_LINE.finditer(header):
        value = int(match.group(2)) if match.group(2) else value + 1
        codes[match.group(1)] = value
    seen: dict[str, set[str]] = {}
    macros = "|".join(sorted(_REPORTS, key=len, reverse=True))
    call = re.compile(rf"\b({macros})\s*\(\s*(?:\w+\s*,\s*)?(?:\w+\s*,\s*)?_(HW_\w+)")
    for path in files(
        gitdir, ref, ("src/common/nvswitch/kernel/**.c", "src/common/nvswitch/kernel/**.h")
    ):
        for match in call.finditer(git(gitdir, "show", f"{ref}:{path}")):
            seen.setdefault(match.group(2), set()).add(_REPORTS[match.group(1)])
    out = []
    for name, code in codes.items():
        if code % 1000 == 0:
            continue  # a block's base value (NVSWITCH_ERR_HW_HOST = 10000), never printed
        kinds = seen.get(name, set())
        severity = next(iter(kinds)) if len(kinds) == 1 else ("mixed" if kinds else "unreported")
        out.append((code, name, severity))
    return out


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("nvidia", "amdgpu", "nvswitch"):
        print(__doc__, file=sys.stderr)
        return 2
    vendor, gitdir = argv[1], argv[2]
    ref = argv[3] if len(argv) > 3 else "HEAD"
    repo = argv[4] if len(argv) > 4 else gitdir
    if vendor == "nvswitch":
        commit = git(gitdir, "rev-parse", ref).strip()
        subject = git(gitdir, "log", "-1", "--format=%s (%cs)", commit).strip()
        print(f"# Derived by scripts/derive_families.py nvswitch from commit {commit}")
        print(f"# of {repo} ({subject}).")
        print("# Do not edit by hand: run the script again on a newer release.")
        print("nvswitch:")
        print(f"  repository: {repo}")
        print(f"  release: {_quote(subject)}")
        print(f"  commit: {commit}")
        print("  sxids:")
        for code, name, severity in nvswitch_sxids(gitdir, ref):
            print(f"    - {{code: {code}, name: {name}, severity: {severity}}}")
        return 0
    families, macros = (NVIDIA, NVIDIA_MACROS) if vendor == "nvidia" else (AMDGPU, LINUX_MACROS)
    commit = git(gitdir, "rev-parse", ref).strip()
    subject = git(gitdir, "log", "-1", "--format=%s (%cs)", commit).strip()
    derived = derive(gitdir, ref, families, macros)
    print(f"# Derived by scripts/derive_families.py {vendor} from commit {commit}")
    print(f"# of {repo} ({subject}).")
    print("# Do not edit by hand: run the script again on a newer release.")
    print(f"{vendor}:")
    print(f"  repository: {repo}")
    print(f"  release: {_quote(subject)}")
    print(f"  commit: {commit}")
    print("  families:")
    for fam in families:
        print(f"    {fam.name}:")
        print(f"      path: {fam.path}")
        print("      members:")
        for p in derived[fam.name]:
            print(
                f"        - {{file: {p.file}, function: {p.function or '?'}, "
                f"level: {p.level}, format: {_quote(p.format)}}}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
