"""The numbers of NVML's C ABI the simulation answers with: return codes, struct versions,
enum counts (here, so the simulation needs no pynvml)."""

from __future__ import annotations

# NVML return codes
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
RESET_REQUIRED = 16
IN_USE = 19
INSUFFICIENT_RESOURCES = 23
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

GI_PROFILE_INFO_V2 = 0x02000098
CI_PROFILE_INFO_V2 = 0x02000088
GI_ENUM_COUNT = 0x12
CI_ENUM_COUNT = 0x9
NO_MIG_ID = 0xFFFFFFFF

ERROR_TEXT = {
    IN_USE: "In use by another client",
    INSUFFICIENT_RESOURCES: "Insufficient resources",
    ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
}
